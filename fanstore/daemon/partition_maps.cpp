// PartitionMaps: mmap + read lease per staged partition; a broken lease turns the mapping off.
#include "partition_maps.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "log.hpp"

namespace fanstore::daemon {
namespace {

// Bumped by the lease-break signal; each PartitionMaps then asks its leases (F_GETLEASE) whether one is broken.
std::atomic<uint64_t> g_lease_breaks{0};

void OnLeaseBreak(int, siginfo_t*, void*) { g_lease_breaks.fetch_add(1, std::memory_order_relaxed); }

// A real-time signal of our own rather than the default SIGIO (whose default action ends the process should the
// handler ever be missing). SA_RESTART: a thread it lands in resumes its system call.
int LeaseSignal() {
  static const int sig = [] {
    int s = SIGRTMIN + 6;
    struct sigaction sa = {};
    sa.sa_sigaction = OnLeaseBreak;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(s, &sa, nullptr) == 0 ? s : -1;
  }();
  return sig;
}

}  // namespace

PartitionMaps::PartitionMaps(const Image& img) {
  parts_.resize(img.PartitionCount());
  int sig = LeaseSignal();
  if (sig < 0) return;
  for (uint32_t i = 0; i < parts_.size(); ++i) {
    if (!img.HasPartition(i)) continue;
    int fd = open(img.PartitionPath(i).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    // The lease first: from then on nobody changes the file without our saying so; the size is read after it.
    if (fcntl(fd, F_SETSIG, sig) != 0 || fcntl(fd, F_SETLEASE, F_RDLCK) != 0 || fstat(fd, &st) != 0 ||
        st.st_size <= 0) {
      close(fd);
      continue;
    }
    void* m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      fcntl(fd, F_SETLEASE, F_UNLCK);
      close(fd);
      continue;
    }
    Part& p = parts_[i];
    p.fd = fd;
    p.base = static_cast<const char*>(m);
    p.size = static_cast<uint64_t>(st.st_size);
    p.usable = p.leased = true;
  }
}

PartitionMaps::~PartitionMaps() {
  for (Part& p : parts_) {
    if (p.base) munmap(const_cast<char*>(p.base), p.size);
    if (p.leased) fcntl(p.fd, F_SETLEASE, F_UNLCK);
    if (p.fd >= 0) close(p.fd);
  }
}

const char* PartitionMaps::Pin(uint32_t part, uint64_t offset, uint64_t n) {
  CheckLeases();  // a writer may be waiting since the last step
  if (part >= parts_.size()) return nullptr;
  Part& p = parts_[part];
  if (!p.usable || offset > p.size || n > p.size - offset) return nullptr;
  ++p.in_flight;
  return p.base + offset;
}

void PartitionMaps::Unpin(uint32_t part) {
  if (part >= parts_.size()) return;
  Part& p = parts_[part];
  if (p.in_flight > 0) --p.in_flight;
  GiveBackIfIdle(p);
}

void PartitionMaps::CheckLeases() {
  uint64_t breaks = g_lease_breaks.load(std::memory_order_relaxed);
  if (breaks == seen_breaks_) return;
  seen_breaks_ = breaks;
  for (uint32_t i = 0; i < parts_.size(); ++i) {
    Part& p = parts_[i];
    if (!p.usable) continue;
    // While a break is pending, F_GETLEASE answers the type it is being broken to (F_UNLCK).
    if (fcntl(p.fd, F_GETLEASE) == F_RDLCK) continue;
    p.usable = false;
    Info("partition %u's staged copy is being written or truncated by another process: sending it by pread from "
         "now on%s",
         i, p.in_flight ? " (the writer waits for the sends in flight)" : "");
    GiveBackIfIdle(p);
  }
}

void PartitionMaps::GiveBackIfIdle(Part& p) {
  if (p.usable || !p.leased || p.in_flight > 0) return;
  fcntl(p.fd, F_SETLEASE, F_UNLCK);
  p.leased = false;
}

size_t PartitionMaps::mapped() const {
  size_t n = 0;
  for (const Part& p : parts_) n += p.usable;
  return n;
}

}  // namespace fanstore::daemon
