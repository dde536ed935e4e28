#include "partition_maps.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include "fanstore/protocol/range_check.hpp"
#include "log.hpp"

namespace fanstore::daemon {
namespace {

// Bumped by the lease-break signal; each PartitionMaps then asks its leases (F_GETLEASE) whether one is broken.
std::atomic<uint64_t> g_lease_breaks{0};

void OnLeaseBreak(int, siginfo_t*, void*) { g_lease_breaks.fetch_add(1, std::memory_order_relaxed); }

void CountBreaks(int sig) {
  struct sigaction sa = {};
  sa.sa_sigaction = OnLeaseBreak;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;  // a thread it lands in resumes its system call
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

// A real-time signal of our own. Should the kernel be unable to queue it (the user's RLIMIT_SIGPENDING used up),
// it sends plain SIGIO instead, whose default action ends the process: so SIGIO is counted too, unless someone
// else handles it already. -1: no signal (nothing is mapped).
int LeaseSignal() {
  static const int sig = [] {
    int s = SIGRTMIN + 6;
    struct sigaction old = {};
    if (sigaction(SIGIO, nullptr, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO))
      CountBreaks(SIGIO);
    CountBreaks(s);
    struct sigaction now = {};
    return sigaction(s, nullptr, &now) == 0 && now.sa_sigaction == OnLeaseBreak ? s : -1;
  }();
  return sig;
}

int64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// File systems whose files only this node can change (a lease then guards against every writer).
bool NodeLocal(int fd) {
  struct statfs sf;
  if (fstatfs(fd, &sf) != 0) return false;
  switch (static_cast<unsigned long>(sf.f_type)) {
    case TMPFS_MAGIC:
    case EXT4_SUPER_MAGIC:  // also ext2 and ext3
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case F2FS_SUPER_MAGIC: return true;
    default: return false;
  }
}

// Half the kernel's lease-break time: how long a send from a retired mapping may stay in flight.
int64_t BreakGraceMs() {
  std::ifstream f("/proc/sys/fs/lease-break-time");
  long s = 45;
  if (!(f >> s) || s < 0) s = 45;
  return s * 1000 / 2;
}

}  // namespace

PartitionMaps::PartitionMaps(const Image& img, int64_t break_grace_ms)
    : parts_(img.PartitionCount()),
      polled_ms_(NowMs()),
      break_grace_ms_(break_grace_ms >= 0 ? break_grace_ms : BreakGraceMs()) {
  for (uint32_t i = 0; i < parts_.size(); ++i) parts_[i].path = img.PartitionPath(i);
}

void PartitionMaps::Map(uint32_t i) {
  int sig = LeaseSignal();
  if (off_ || sig < 0 || i >= parts_.size() || parts_[i].fd >= 0) return;
  int fd = open(parts_[i].path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  // The lease first: from then on nobody changes the file without our saying so; the size is read after it.
  if (!NodeLocal(fd) || fcntl(fd, F_SETSIG, sig) != 0 || fcntl(fd, F_SETLEASE, F_RDLCK) != 0 || fstat(fd, &st) != 0 ||
      st.st_size <= 0) {
    close(fd);
    return;
  }
  void* m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    fcntl(fd, F_SETLEASE, F_UNLCK);
    close(fd);
    return;
  }
  Part& p = parts_[i];
  p.fd = fd;
  p.base = static_cast<char*>(m);
  p.size = static_cast<uint64_t>(st.st_size);
  p.usable = p.leased = true;
}

PartitionMaps::~PartitionMaps() {
  for (Part& p : parts_) {
    if (p.base) munmap(p.base, p.size);
    if (p.leased) fcntl(p.fd, F_SETLEASE, F_UNLCK);
    if (p.fd >= 0) close(p.fd);
  }
}

const char* PartitionMaps::Pin(uint32_t part, uint64_t offset, uint64_t n) {
  if (part >= parts_.size()) return nullptr;
  Part& p = parts_[part];
  if (!p.usable || !RangeWithin(offset, n, p.size)) return nullptr;
  ++p.in_flight;
  return p.base + offset;
}

void PartitionMaps::Unpin(uint32_t part) {
  if (part >= parts_.size()) return;
  Part& p = parts_[part];
  if (p.in_flight > 0) --p.in_flight;
  GiveBackIfIdle(p, NowMs());
}

void PartitionMaps::CheckLeases() {
  uint64_t breaks = g_lease_breaks.load(std::memory_order_relaxed);
  bool ask = breaks != seen_breaks_;
  int64_t now = NowMs();
  // Once a second regardless: a break signal may have been lost (or taken by another handler).
  if (now - polled_ms_ >= 1000) ask = true;
  if (ask) {
    seen_breaks_ = breaks;
    polled_ms_ = now;
    for (uint32_t i = 0; i < parts_.size(); ++i) {
      // While a break is pending, F_GETLEASE answers the type it is being broken to (F_UNLCK).
      if (parts_[i].usable && fcntl(parts_[i].fd, F_GETLEASE) != F_RDLCK)
        Retire(i, "is being written or truncated by another process");
    }
  }
  if (retired_held_ > 0)
    for (Part& p : parts_) GiveBackIfIdle(p, now);
}

void PartitionMaps::TurnOff() {
  off_ = true;
  for (uint32_t i = 0; i < parts_.size(); ++i)
    if (parts_[i].usable) Retire(i, "could not be sent from its mapping by this MPI");
}

void PartitionMaps::Retire(uint32_t i, const char* why) {
  Part& p = parts_[i];
  p.usable = false;
  p.broken_ms = NowMs();
  if (p.leased) ++retired_held_;
  Info("partition %u's staged copy %s: sending it by pread from now on%s", i, why,
       p.in_flight ? " (once the sends in flight are over)" : "");
  GiveBackIfIdle(p, p.broken_ms);
}

void PartitionMaps::GiveBackIfIdle(Part& p, int64_t now_ms) {
  if (p.usable || !p.leased) return;
  if (p.in_flight > 0) {
    if (now_ms - p.broken_ms < break_grace_ms_) return;
    // Sends that never completed (their asker stopped or died) would outlive the lease: they read zeros from here
    // on, never a truncated file's missing page. The client's checksum rejects what they deliver.
    if (mmap(p.base, p.size, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED) return;
    Info("%llu send(s) from a retired mapping still in flight after %lld ms: they now send zeros",
         static_cast<unsigned long long>(p.in_flight), static_cast<long long>(now_ms - p.broken_ms));
  }
  fcntl(p.fd, F_SETLEASE, F_UNLCK);
  p.leased = false;
  --retired_held_;
}

size_t PartitionMaps::mapped() const {
  size_t n = 0;
  for (const Part& p : parts_) n += p.usable;
  return n;
}

}  // namespace fanstore::daemon
