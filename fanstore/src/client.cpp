// fanstore::Client: lookups, stat data, decoded+verified file bytes and real kernel fds for front ends.
#include "fanstore/client.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>

#include "decoded_cache.hpp"
#include "fanstore/daemon_client.hpp"
#include "fanstore/env.hpp"
#include "fanstore/path.hpp"

namespace fanstore {

struct Client::Cache : DecodedCache {
  using DecodedCache::DecodedCache;
};

namespace {

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Writes all of [p, p+n) to fd, retrying short writes and EINTR.
bool WriteAll(int fd, const char* p, uint64_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<uint64_t>(w);
  }
  return true;
}

// Cached memfds stay open: take at most 1/8 of the soft fd limit (and 256), so a program that opens
// many files itself never meets EMFILE because of us.
size_t CacheFdCap() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 256;
  return std::min<size_t>(256, rl.rlim_cur / 8);
}

// A new read-only open file description of our memfd `m` (its own offset, O_RDONLY in F_GETFL).
// Checks the inode recorded when the memfd was made: if the program closed or dup2'ed over that fd
// number, the reopen names another file and we must fail rather than hand out its bytes.
int ReopenReadOnly(const FileBytes::Memfd& m, int flags) {
  char proc[64];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", m.fd);
  int fd = open(proc, O_RDONLY | (flags & O_CLOEXEC));
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_ino != m.ino || st.st_dev != m.dev) {
    close(fd);
    errno = EBADF;
    return -1;
  }
  return fd;
}

// Plain heap storage for a decoded file below the memfd size (SetMemfdMinBytes).
class PlainBytes final : public DecodedBytes {
 public:
  explicit PlainBytes(uint64_t n) : buf_(new (std::nothrow) char[n ? n : 1]), n_(n) {}
  bool ok() const { return buf_ != nullptr; }
  const char* data() const override { return buf_.get(); }
  uint64_t size() const override { return n_; }
  char* writable() { return buf_.get(); }

 private:
  std::unique_ptr<char[]> buf_;
  uint64_t n_;
};

// Identity of a memfd we just made.
FileBytes::Memfd IdentityOf(int fd) {
  FileBytes::Memfd m;
  struct stat st;
  if (fstat(fd, &st) == 0) {
    m.fd = fd;
    m.dev = st.st_dev;
    m.ino = st.st_ino;
  }
  return m;
}

// Every failed load is counted and reported once, with the one line a user sees; the front end
// then reports EIO (or what the status maps to).
Status ReportLoadFailure(ClientStats& stats, Status s) {
  stats.errors.fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "fanstore: %s\n", s.ToString().c_str());
  return s;
}

}  // namespace

std::string ClientStats::Line() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "fanstore[pid %d]: opens=%llu stats=%llu readdirs=%llu missing=%llu bytes=%llu local=%llu "
                "remote=%llu remote_bytes=%llu cache_hits=%llu errors=%llu",
                static_cast<int>(getpid()), static_cast<unsigned long long>(opens.load()),
                static_cast<unsigned long long>(stats.load()), static_cast<unsigned long long>(readdirs.load()),
                static_cast<unsigned long long>(lookups_missing.load()),
                static_cast<unsigned long long>(bytes_read.load()),
                static_cast<unsigned long long>(local_loads.load()),
                static_cast<unsigned long long>(remote_loads.load()),
                static_cast<unsigned long long>(remote_bytes.load()),
                static_cast<unsigned long long>(cache_hits.load()), static_cast<unsigned long long>(errors.load()));
  return buf;
}

Client::Client(ClientOptions opts, std::shared_ptr<const Image> image)
    : opts_(std::move(opts)), image_(std::move(image)), cache_(std::make_unique<Cache>(opts_.cache_bytes, CacheFdCap())) {
  // A fixed, recognisable device number per image directory so st_dev/st_ino pairs are stable.
  uint32_t h = static_cast<uint32_t>(std::hash<std::string>{}(image_->dir()));
  dev_ = makedev(0xfa5, h & 0xfffff);
}

Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Create(const ClientOptions& opts) {
  if (opts.mount.empty() || opts.mount[0] != '/')
    return Status(Code::kInvalidArgument, "mount prefix '" + opts.mount + "' must be an absolute path");
  ImageOpenOptions io;
  io.partition_dir = opts.partition_dir;
  auto img = Image::Open(opts.image, io);
  if (!img.ok()) return img.status();
  ClientOptions o = opts;
  o.mount = NormalizeAbsolute(opts.mount);
  return std::unique_ptr<Client>(new Client(std::move(o), std::move(img).value()));
}

Result<std::unique_ptr<Client>> Client::FromEnv() {
  ClientOptions o;
  const char* image = std::getenv(env::kImage);
  const char* daemon = std::getenv(env::kDaemon);
  if (daemon && *daemon) {
    // Daemon mode wins over FANSTORE_IMAGE: the daemon names its staged index copy and the local partition
    // directory (read directly), and everything else comes through it.
    DaemonInfo info;
    auto fetcher = ConnectDaemonFetcher(daemon, &info);
    if (!fetcher.ok()) return fetcher.status();
    o.image = info.index_dir;
    o.partition_dir = info.partition_dir;
    o.remote = std::move(fetcher).value();
  } else {
    if (!image || !*image)
      return Status(Code::kInvalidArgument, std::string(env::kImage) + " (or " + env::kDaemon + ") is not set");
    o.image = image;
  }
  if (const char* m = std::getenv(env::kMount); m && *m) o.mount = m;
  if (const char* c = std::getenv(env::kCacheBytes); c && *c) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(c, &end, 10);
    if (end == c || *end != '\0')
      return Status(Code::kInvalidArgument, std::string(env::kCacheBytes) + "='" + c + "' is not a byte count");
    o.cache_bytes = v;
  }
  return Create(o);
}

Result<uint32_t> Client::Lookup(std::string_view rel) {
  auto r = image_->Lookup(rel);
  if (r.ok()) return r;
  stats_.lookups_missing.fetch_add(1, std::memory_order_relaxed);
  // POSIX says ENOTDIR when a leading component exists but is not a directory; only pay for it on a miss.
  for (size_t pos = rel.find('/'); pos != std::string_view::npos; pos = rel.find('/', pos + 1)) {
    auto p = image_->Lookup(rel.substr(0, pos));
    if (!p.ok()) break;
    if (!image_->Get(*p).is_dir())
      return Status(Code::kNotDirectory, std::string(rel.substr(0, pos)) + " is not a directory");
  }
  return r.status();
}

void Client::FillStat(uint32_t id, struct stat* st) const {
  Entry e = image_->Get(id);
  stats_.stats.fetch_add(1, std::memory_order_relaxed);
  std::memset(st, 0, sizeof *st);
  st->st_dev = dev_;
  st->st_ino = e.ino;
  st->st_mode = e.mode;
  st->st_nlink = e.nlink;
  st->st_uid = getuid();
  st->st_gid = getgid();
  st->st_size = static_cast<off_t>(e.size);
  st->st_blksize = 4096;
  // As a local file system with 4 KiB blocks would report it, so `du` and `ls -s` agree with the source.
  st->st_blocks = static_cast<blkcnt_t>(RoundUp(e.size, 4096) / 512);
  st->st_mtim.tv_sec = e.mtime_sec;
  st->st_mtim.tv_nsec = e.mtime_nsec;
  st->st_atim = st->st_mtim;
  st->st_ctim = st->st_mtim;
}

Result<std::shared_ptr<const FileBytes>> Client::Load(uint32_t id) {
  Entry e = image_->Get(id);
  if (e.is_dir()) return Status(Code::kIsDirectory, std::string(e.path) + " is a directory");
  if (auto hit = cache_->Get(id)) {
    stats_.cache_hits.fetch_add(1, std::memory_order_relaxed);
    return hit;
  }
  // Large raw files (JPEG-like data, HDF5 volumes) in a local partition: verify in place and serve from
  // the partition's page cache, instead of copying every byte into freshly zeroed memory per open.
  constexpr uint64_t kServeInPlaceMin = 64 * 1024;
  if (e.codec == Codec::kRaw && e.size >= kServeInPlaceMin && image_->HasPartition(e.part)) {
    auto m = image_->MapRawFile(id);
    if (m.ok()) {
      stats_.local_loads.fetch_add(1, std::memory_order_relaxed);
      std::shared_ptr<const FileBytes> shared = WrapPartitionMapping(*m, e.size);
      cache_->Put(id, shared);
      return shared;
    }
    if (m.status().code() == Code::kCorrupt) return ReportLoadFailure(stats_, m.status());
    // Could not map (address space, odd file system): decode into memory below.
  }
  char* out = nullptr;
  std::unique_ptr<DecodedBytes> bytes;
  if (memfd_min_bytes_ > kMemfdThreshold && e.size >= kMemfdThreshold && e.size < memfd_min_bytes_ &&
      e.size < (1ull << 20)) {
    // Below the front end's memfd size (and the 1 MiB where AllocateFileBytes maps anonymous memory).
    auto plain = std::make_unique<PlainBytes>(e.size);
    if (plain->ok()) {
      out = plain->writable();
      bytes = std::move(plain);
    }
  } else {
    bytes = AllocateFileBytes(e.size, &out, internal_fd_hook_);
  }
  if (!bytes) {
    stats_.errors.fetch_add(1, std::memory_order_relaxed);
    return Status(Code::kNoMemory, "cannot allocate " + std::to_string(e.size) + " bytes for " + std::string(e.path));
  }
  Status s;
  if (e.size == 0) {
    // Nothing stored; still count it as a local load.
    stats_.local_loads.fetch_add(1, std::memory_order_relaxed);
  } else if (image_->HasPartition(e.part)) {
    s = image_->ReadFile(id, out);
    stats_.local_loads.fetch_add(1, std::memory_order_relaxed);
  } else if (opts_.remote) {
    // Decoded straight from the fetcher's buffer (the daemon's shared reply area): no intermediate copy.
    s = opts_.remote->WithStored(e, [&](const char* data, size_t n) { return DecodeStored(e, data, n, out); });
    stats_.remote_loads.fetch_add(1, std::memory_order_relaxed);
    if (s.ok()) stats_.remote_bytes.fetch_add(e.stored_size, std::memory_order_relaxed);
  } else {
    s = Status(Code::kIoError, "partition " + std::to_string(e.part) + " holding " + std::string(e.path) +
                                   " is not on this node and no daemon is configured");
  }
  if (s.ok() && !bytes->Freeze()) s = Status::FromErrno(errno, "sealing the decoded " + std::string(e.path));
  if (!s.ok()) return ReportLoadFailure(stats_, s);
  std::shared_ptr<const FileBytes> shared(std::move(bytes));
  cache_->Put(id, shared);
  return shared;
}

Result<int> Client::OpenFd(uint32_t id, int flags) {
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)) != 0)
    return Status(Code::kReadOnly, "the FanStore image is read-only");
  auto bytes = OpenBytes(id);
  if (!bytes.ok()) return bytes.status();
  return FdForBytes(**bytes, flags);
}

Result<std::shared_ptr<const FileBytes>> Client::OpenBytes(uint32_t id) {
  auto bytes = Load(id);
  if (!bytes.ok()) return bytes.status();
  stats_.opens.fetch_add(1, std::memory_order_relaxed);
  stats_.bytes_read.fetch_add((*bytes)->size(), std::memory_order_relaxed);
  return bytes;
}

Result<int> Client::FdForBytes(const FileBytes& b, int flags) {
  // A memfd holds the true bytes, so everything that reaches the kernel with this fd (mmap, sendfile,
  // fdopen, exec'd children) sees the file. It is reopened read-only so writes fail as on a read-only
  // file and fcntl(F_GETFL) says O_RDONLY. Larger files were decoded straight into their memfd.
  if (b.memfd().fd >= 0) {
    int fd = ReopenReadOnly(b.memfd(), flags);
    if (fd >= 0) return fd;
    // No /proc, or our memfd was closed behind our back: copy into a fresh one below.
  }
  int mfd = memfd_create("fanstore", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (mfd < 0) return Status::FromErrno(errno, "memfd_create");
  if (!WriteAll(mfd, b.data(), b.size())) {
    int err = errno;
    close(mfd);
    return Status::FromErrno(err, "writing the decoded file to a memfd");
  }
  fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  int fd = ReopenReadOnly(IdentityOf(mfd), flags);
  if (fd >= 0) {
    close(mfd);
  } else {
    // No /proc: keep the sealed memfd itself, rewound, with the caller's close-on-exec choice.
    fd = mfd;
    lseek(fd, 0, SEEK_SET);
    if (!(flags & O_CLOEXEC)) fcntl(fd, F_SETFD, 0);
  }
  return fd;
}

void Client::AtForkPrepare() {
  cache_->LockForFork();
  if (opts_.remote) opts_.remote->AtForkPrepare();  // after the cache lock: the fetch path never nests them
}
void Client::AtForkParent() {
  if (opts_.remote) opts_.remote->AtForkParent();
  cache_->UnlockForFork();
}
void Client::AtForkChild() {
  cache_->UnlockForFork();
  if (opts_.remote) opts_.remote->AfterForkChild();
}

}  // namespace fanstore
