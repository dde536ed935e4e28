// Lazy fds: the table of lazy fd numbers, the user-space reads, and materialization into real kernel fds.
#include "lazy.hpp"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>

#include "fanstore/env.hpp"
#include "real.hpp"
#include "state.hpp"

namespace fanstore::interpose::lazy {

struct LazyFile {
  std::shared_ptr<OpenFile> file;
  uint32_t id = 0;
  std::atomic<int> refs{1};
  std::mutex mu;  // guards everything below
  int64_t offset = 0;
  int flags = 0;  // status flags reported by F_GETFL (besides O_RDONLY|O_LARGEFILE)
  bool materialized = false;
};

std::atomic<LazyFile*> g_slots[FdTable::kCapacity];
std::atomic<int> g_live{0};

namespace {

std::atomic<int> g_placeholder{-1};
std::atomic<bool> g_enabled{false};
// The placeholders' inodes (sockets): every lazy fd is a dup of one, and no other file has them. More
// than one only after a placeholder was closed behind our back and replaced (dups of the old one live on).
constexpr int kMaxPlaceholders = 8;
std::atomic<uint64_t> g_ph_dev[kMaxPlaceholders];
std::atomic<uint64_t> g_ph_ino[kMaxPlaceholders];
std::atomic<int> g_ph_count{0};

bool RememberPlaceholder(int ph) {
  struct stat st;
  int k = g_ph_count.load(std::memory_order_acquire);
  if (k == kMaxPlaceholders || FS_REAL(fstat, ph, &st) != 0) return false;
  g_ph_dev[k].store(st.st_dev, std::memory_order_relaxed);
  g_ph_ino[k].store(st.st_ino, std::memory_order_relaxed);
  g_ph_count.store(k + 1, std::memory_order_release);
  return true;
}

// Largest single transfer the kernel does (MAX_RW_COUNT).
constexpr size_t kMaxRw = 0x7ffff000;
// The kernel's O_LARGEFILE, which F_GETFL reports on 64-bit (glibc's O_LARGEFILE is 0 there).
constexpr int kKernelLargefile = 0100000;
// The status flags a lazy fd keeps itself; F_SETFL with any other bit materializes first.
constexpr int kKeptFlags = O_APPEND | O_NONBLOCK | O_NOATIME;

// Per fd-number spinlocks: install/remove a slot and take a reference atomically, so a LazyFile is
// never freed while another thread is taking a reference to it.
constexpr int kShards = 256;
std::atomic<bool> g_shard[kShards];
void LockShard(int fd) {
  auto& l = g_shard[fd & (kShards - 1)];
  while (l.exchange(true, std::memory_order_acquire))
    while (l.load(std::memory_order_relaxed)) sched_yield();
}
void UnlockShard(int fd) { g_shard[fd & (kShards - 1)].store(false, std::memory_order_release); }

// Fork gate: every lazy call runs as a reader; fork takes it as the writer (writer-preferring), so
// no thread is inside a lazy call (holding a shard or a LazyFile lock) when the child is made.
std::atomic<int> g_readers{0};
std::atomic<bool> g_writer{false};
struct ReadGate {
  ReadGate() {
    for (;;) {
      while (g_writer.load(std::memory_order_acquire)) sched_yield();
      g_readers.fetch_add(1, std::memory_order_acq_rel);
      if (!g_writer.load(std::memory_order_acquire)) break;
      g_readers.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  ~ReadGate() { g_readers.fetch_sub(1, std::memory_order_acq_rel); }
  ReadGate(const ReadGate&) = delete;
  ReadGate& operator=(const ReadGate&) = delete;
};

void Unref(LazyFile* p) {
  if (p != nullptr && p->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p;
}

LazyFile* Acquire(int fd) {
  if (fd < 0 || fd >= FdTable::kCapacity) return nullptr;
  LockShard(fd);
  LazyFile* p = g_slots[fd].load(std::memory_order_acquire);
  if (p != nullptr) p->refs.fetch_add(1, std::memory_order_relaxed);
  UnlockShard(fd);
  return p;
}

struct Ref {
  LazyFile* p;
  explicit Ref(int fd) : p(Acquire(fd)) {}
  ~Ref() { Unref(p); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
};

// Replaces slot fd with p (whose reference the slot takes over); drops the old one.
void SetSlot(int fd, LazyFile* p) {
  LockShard(fd);
  LazyFile* old = g_slots[fd].exchange(p, std::memory_order_acq_rel);
  UnlockShard(fd);
  if (p) g_live.fetch_add(1, std::memory_order_acq_rel);
  if (old) {
    g_live.fetch_sub(1, std::memory_order_acq_rel);
    Unref(old);
  }
}

// Caller holds the gate (reader or writer). See Materialize().
int MaterializeLocked(int fd) {
  Ref r(fd);
  LazyFile* p = r.p;
  if (p == nullptr) return 0;
  std::lock_guard<std::mutex> lock(p->mu);
  if (p->materialized) return 0;
  ReentrancyGuard guard;
  Result<int> made = [&]() -> Result<int> {
    try {
      return p->file->KernelFd(O_CLOEXEC);
    } catch (const std::bad_alloc&) {
      return Status(Code::kNoMemory, "out of memory");
    } catch (...) {
      return Status(Code::kIoError, "unexpected exception");
    }
  }();
  if (!made.ok()) {
    errno = ToErrno(made.status());
    return -1;
  }
  int tmp = *made;
  FdTable::Clear(tmp);  // the Client's open marked it internal; it is a temporary of ours
  if (FS_REAL(lseek, tmp, static_cast<off_t>(p->offset), SEEK_SET) < 0 ||
      (p->flags && FS_REAL(fcntl, tmp, F_SETFL, p->flags) < 0)) {
    int err = errno;
    FS_REAL(close, tmp);
    errno = err;
    return -1;
  }
  int hw = FdTable::HighWater();
  int err = 0;
  for (int i = 0; i < hw; ++i) {
    if (g_slots[i].load(std::memory_order_acquire) != p) continue;
    LockShard(i);
    if (g_slots[i].load(std::memory_order_acquire) == p && !IsPlaceholderFile(i)) {
      // Not a dup of a placeholder: closed behind our back (a raw close or close_range) and reused, so the
      // number is the program's now: never dup3 over it, it simply stops being lazy. Unless the placeholder
      // itself was lost the same way (then i may be one of ours made from the program's file, and neither
      // replacing nor reading it is safe: the call fails with EIO).
      int ph = g_placeholder.load(std::memory_order_acquire);
      if (!IsPlaceholderFile(ph)) {
        UnlockShard(i);
        PlaceholderLost(ph);
        err = EIO;
        continue;
      }
      g_slots[i].store(nullptr, std::memory_order_release);
      UnlockShard(i);
      g_live.fetch_sub(1, std::memory_order_acq_rel);
      Unref(p);
      continue;
    }
    if (g_slots[i].load(std::memory_order_acquire) == p) {
      // Under the shard lock: a concurrent close() of i clears the slot before closing, so i is
      // still this lazy fd and dup3 cannot land on a number someone else has opened.
      int fdflags = FS_REAL(fcntl, i, F_GETFD);
      if (FS_REAL(dup3, tmp, i, (fdflags > 0 && (fdflags & FD_CLOEXEC)) ? O_CLOEXEC : 0) < 0) {
        err = errno;
        UnlockShard(i);
        continue;  // i stays lazy (and keeps failing kernel calls with EBADF rather than lying)
      }
      g_slots[i].store(nullptr, std::memory_order_release);
      UnlockShard(i);
      g_live.fetch_sub(1, std::memory_order_acq_rel);
      Unref(p);  // the slot's reference (r still holds one)
      continue;
    }
    UnlockShard(i);
  }
  FS_REAL(close, tmp);
  if (err != 0) {
    errno = err;
    return -1;
  }
  p->materialized = true;
  return 0;
}

}  // namespace

namespace {
// An O_PATH fd on a fresh socket inode, marked internal; -1 on failure.
int MakePlaceholder() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", sv[0]);
  int ph = FS_REAL(open, path, O_PATH | O_CLOEXEC);
  FS_REAL(close, sv[0]);
  FS_REAL(close, sv[1]);
  if (ph < 0) return -1;
  FdTable::MarkInternal(ph);
  return ph;
}
}  // namespace

bool Init() {
  const char* e = getenv(env::kLazy);
  if (e != nullptr && strcmp(e, "0") == 0) return false;
  int ph = MakePlaceholder();
  if (ph < 0 || !RememberPlaceholder(ph)) return false;
  g_placeholder.store(ph, std::memory_order_release);
  g_enabled.store(true, std::memory_order_release);
  return true;
}

bool IsPlaceholderFile(int fd) {
  struct stat st;
  if (FS_REAL(fstat, fd, &st) != 0) return false;
  int n = g_ph_count.load(std::memory_order_acquire);
  for (int k = 0; k < n; ++k)
    if (g_ph_ino[k].load(std::memory_order_relaxed) == st.st_ino &&
        g_ph_dev[k].load(std::memory_order_relaxed) == st.st_dev)
      return true;
  return false;
}

void PlaceholderLost(int fd) {
  int ph = g_placeholder.load(std::memory_order_acquire);
  if (!Enabled() || fd != ph) return;
  // Its number now belongs to the program (closed behind our back, then reused): lazy fds made from
  // now on are dups of a new one, on a new inode, so every dup of the old one is still recognised.
  int fresh = MakePlaceholder();
  if (fresh < 0 || !RememberPlaceholder(fresh)) {
    if (fresh >= 0) {
      FdTable::Clear(fresh);
      FS_REAL(close, fresh);
    }
    g_enabled.store(false, std::memory_order_release);  // opens fall back to memfds (as FANSTORE_LAZY=0)
    return;
  }
  g_placeholder.store(fresh, std::memory_order_release);
}

bool Enabled() { return g_enabled.load(std::memory_order_acquire); }

int Open(uint32_t id, std::shared_ptr<OpenFile> file, int flags) {
  ReadGate gate;
  int fd =
      FS_REAL(fcntl, g_placeholder.load(std::memory_order_acquire), (flags & O_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
  if (fd < 0) return -1;
  if (fd >= FdTable::kCapacity || !FdTable::Track(fd, id)) {
    FS_REAL(close, fd);
    errno = EMFILE;
    return -1;
  }
  auto* p = new LazyFile;
  p->file = std::move(file);
  p->id = id;
  p->flags = flags & kKeptFlags;
  SetSlot(fd, p);
  return fd;
}

void Forget(int fd) {
  if (!Is(fd)) return;
  ReadGate gate;
  SetSlot(fd, nullptr);
}

void CopyOnDup(int from, int to) {
  if (to < 0 || to >= FdTable::kCapacity) return;
  if (!Is(from) && !Is(to)) return;
  ReadGate gate;
  LazyFile* p = Acquire(from);  // the reference goes to slot `to`
  SetSlot(to, p);
}

bool Dup(int from, int (*dup_fn)(void*), void* ctx, int* out) {
  ReadGate gate;
  Ref r(from);
  LazyFile* p = r.p;
  if (p == nullptr) return false;
  std::lock_guard<std::mutex> lock(p->mu);  // materialization holds it from start to end
  if (p->materialized) return false;
  int nfd = dup_fn(ctx);
  int err = errno;
  if (nfd >= 0 && nfd != from && nfd < FdTable::kCapacity) {
    p->refs.fetch_add(1, std::memory_order_relaxed);
    SetSlot(nfd, p);
  }
  *out = nfd;
  errno = err;
  return true;
}

int Materialize(int fd) {
  if (!Is(fd)) return 0;
  ReadGate gate;
  return MaterializeLocked(fd);
}

void BeforeReopen(const char* path) {
  if (!Any() || path == nullptr || path[0] != '/') return;
  const char* num = nullptr;
  if (strncmp(path, "/dev/fd/", 8) == 0) {
    num = path + 8;
  } else if (strncmp(path, "/proc/self/fd/", 14) == 0) {
    num = path + 14;
  } else if (strncmp(path, "/proc/thread-self/fd/", 21) == 0) {
    num = path + 21;
  } else if (strcmp(path, "/dev/stdin") == 0 || strcmp(path, "/dev/stdout") == 0 || strcmp(path, "/dev/stderr") == 0) {
    Materialize(path[5] == 'i' ? 0 : path[8] == 'o' ? 1 : 2);
    return;
  } else {
    return;
  }
  int fd = 0;
  for (; *num >= '0' && *num <= '9' && fd < FdTable::kCapacity; ++num) fd = fd * 10 + (*num - '0');
  if (*num == '\0' || *num == '/') Materialize(fd);
}

void MaterializeAll(bool only_inheritable) {
  if (!Any()) return;
  int saved = errno;
  ReadGate gate;
  int hw = FdTable::HighWater();
  for (int i = 0; i < hw; ++i) {
    if (!Is(i)) continue;
    if (only_inheritable) {
      int fl = FS_REAL(fcntl, i, F_GETFD);
      if (fl < 0 || (fl & FD_CLOEXEC)) continue;
    }
    MaterializeLocked(i);
  }
  errno = saved;
}

// Takes p->mu: the byte range [*at, *at + *len) a read of up to `want` bytes gets, at *pos when given,
// else at the shared offset, which it advances when `advance` (a plain read; sendfile advances only after
// its sink wrote). False when the fd was materialized meanwhile: the caller falls back to the kernel.
bool ClaimRange(LazyFile* p, size_t want, const int64_t* pos, bool advance, uint64_t* at, size_t* len) {
  const uint64_t size = p->file->size();
  std::lock_guard<std::mutex> lock(p->mu);
  if (p->materialized) return false;
  *at = pos ? static_cast<uint64_t>(*pos) : static_cast<uint64_t>(p->offset);
  *len = *at >= size ? 0 : static_cast<size_t>(std::min<uint64_t>(std::min(want, kMaxRw), size - *at));
  if (advance && pos == nullptr) p->offset = static_cast<int64_t>(*at + *len);
  return true;
}

// A read that failed moves no offset (as the kernel's): undo ClaimRange's advance unless someone moved it since.
void Unclaim(LazyFile* p, uint64_t at, size_t len) {
  std::lock_guard<std::mutex> lock(p->mu);
  if (!p->materialized && p->offset == static_cast<int64_t>(at + len)) p->offset = static_cast<int64_t>(at);
}

// Runs `serve` (a range read of p's file: the count, or a status) outside every lock of ours (a read may
// decode), and turns it into what a read returns: the count, or -1 + errno (EIO for a damaged chunk; the client
// has printed its one line).
template <class Serve>
ssize_t ServeRange(size_t len, Serve&& serve) {
  if (len == 0) return 0;
  ReentrancyGuard guard;
  Result<size_t> r = [&]() -> Result<size_t> {
    try {
      return serve();
    } catch (const std::bad_alloc&) {
      return Status(Code::kNoMemory, "out of memory");
    } catch (...) {
      return Status(Code::kIoError, "unexpected exception");
    }
  }();
  if (!r.ok()) {
    errno = ToErrno(r.status());
    return -1;
  }
  return static_cast<ssize_t>(*r);
}

bool Read(int fd, void* buf, size_t n, off_t pos, bool positional, ssize_t* out) {
  ReadGate gate;
  Ref r(fd);
  LazyFile* p = r.p;
  if (p == nullptr) return false;
  if (positional && pos < 0) {
    errno = EINVAL;
    *out = -1;
    return true;
  }
  const int64_t at_pos = pos;
  uint64_t at;
  size_t len;
  if (!ClaimRange(p, n, positional ? &at_pos : nullptr, true, &at, &len)) return false;
  // Straight into the caller's buffer: a whole chunk is read or decoded there, with no copy of ours.
  *out = ServeRange(len, [&] { return p->file->ReadAt(at, buf, len); });
  if (*out < 0 && !positional) Unclaim(p, at, len);
  return true;
}

bool ReadV(int fd, const struct iovec* iov, int iovcnt, off_t pos, bool positional, ssize_t* out) {
  ReadGate gate;
  Ref r(fd);
  LazyFile* p = r.p;
  if (p == nullptr) return false;
  if (iovcnt < 0 || iovcnt > IOV_MAX || (positional && pos < 0)) {
    errno = EINVAL;
    *out = -1;
    return true;
  }
  size_t total = 0;
  for (int i = 0; i < iovcnt; ++i) {
    if (iov[i].iov_len > static_cast<size_t>(SSIZE_MAX) - total) {
      errno = EINVAL;
      *out = -1;
      return true;
    }
    total += iov[i].iov_len;
  }
  const int64_t at_pos = pos;
  uint64_t at;
  size_t len;
  if (!ClaimRange(p, total, positional ? &at_pos : nullptr, true, &at, &len)) return false;
  *out = ServeRange(len, [&]() -> Result<size_t> {
    size_t done = 0;
    for (int i = 0; i < iovcnt && done < len; ++i) {
      const size_t want = std::min(iov[i].iov_len, len - done);
      if (want == 0) continue;
      auto r = p->file->ReadAt(at + done, iov[i].iov_base, want);
      if (!r.ok()) {
        if (done > 0) break;  // as the kernel: the bytes already read are the result
        return r.status();
      }
      done += *r;
    }
    return done;
  });
  if (*out < 0 && !positional) Unclaim(p, at, len);
  return true;
}

bool Transfer(int fd, int64_t* pos, size_t n, ssize_t (*sink)(void*, const char*, size_t), void* ctx, ssize_t* out) {
  LazyFile* p;
  uint64_t at;
  size_t len;
  {
    ReadGate gate;
    p = Acquire(fd);
    if (p == nullptr) return false;
    if (pos != nullptr && *pos < 0) {
      Unref(p);
      errno = EINVAL;
      *out = -1;
      return true;
    }
    if (!ClaimRange(p, n, pos, false, &at, &len)) {
      Unref(p);
      return false;
    }
  }
  // No gate while the sink runs: it may block (a pipe whose reader is not forked yet) and a fork must not wait.
  ssize_t w = 0;
  if (len) {
    int sink_err = 0;
    ReentrancyGuard guard;  // the Client's own opens (a partition under the mount's prefix) must reach libc
    auto served = p->file->Visit(at, len, [&](const char* src, size_t c) -> size_t {
      ssize_t k = sink(ctx, src, c);
      if (k < 0) {
        sink_err = errno;
        return 0;
      }
      w += k;
      return static_cast<size_t>(k);
    });
    if (!served.ok()) {
      w = -1;
      errno = ToErrno(served.status());
    } else if (w == 0 && sink_err != 0) {
      w = -1;
      errno = sink_err;
    }
  }
  if (w > 0) {
    if (pos) {
      *pos = static_cast<int64_t>(at + static_cast<uint64_t>(w));
    } else {
      ReadGate gate;
      std::lock_guard<std::mutex> lock(p->mu);
      if (!p->materialized) p->offset = static_cast<int64_t>(at + static_cast<uint64_t>(w));
    }
  }
  Unref(p);
  *out = w;
  return true;
}

bool Seek(int fd, off_t off, int whence, off_t* out) {
  ReadGate gate;
  Ref r(fd);
  LazyFile* p = r.p;
  if (p == nullptr) return false;
  std::lock_guard<std::mutex> lock(p->mu);
  if (p->materialized) return false;
  const int64_t size = static_cast<int64_t>(p->file->size());
  int64_t base;
  switch (whence) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = p->offset; break;
    case SEEK_END: base = size; break;
    case SEEK_DATA:
    case SEEK_HOLE:
      // One data extent [0, size): as tmpfs answers.
      if (off < 0 || off >= size) {
        errno = ENXIO;
        *out = -1;
        return true;
      }
      p->offset = whence == SEEK_DATA ? off : size;
      *out = static_cast<off_t>(p->offset);
      return true;
    default:
      errno = EINVAL;
      *out = -1;
      return true;
  }
  int64_t target;
  if (__builtin_add_overflow(base, static_cast<int64_t>(off), &target)) {
    errno = EOVERFLOW;
    *out = -1;
    return true;
  }
  if (target < 0) {
    errno = EINVAL;
    *out = -1;
    return true;
  }
  p->offset = target;
  *out = static_cast<off_t>(target);
  return true;
}

bool GetFl(int fd, int* out) {
  ReadGate gate;
  Ref r(fd);
  LazyFile* p = r.p;
  if (p == nullptr) return false;
  std::lock_guard<std::mutex> lock(p->mu);
  if (p->materialized) return false;
  *out = O_RDONLY | kKernelLargefile | p->flags;
  return true;
}

bool SetFl(int fd, int flags, int* out) {
  ReadGate gate;
  Ref r(fd);
  LazyFile* p = r.p;
  if (p == nullptr) return false;
  std::lock_guard<std::mutex> lock(p->mu);
  if (p->materialized) return false;
  // Only bits the kernel lets F_SETFL change; the ones a lazy fd cannot honour itself make the caller
  // materialize first (false with *out = 1).
  if (flags & (O_ASYNC | O_DIRECT)) {
    *out = 1;
    return false;
  }
  p->flags = flags & kKeptFlags;
  *out = 0;
  return true;
}

void LockForFork() {
  // Materialize first (this takes the Client's cache lock, which the Client's own prepare handler takes
  // after us), then close the gate. A lazy fd opened between the two is materialized under the gate.
  MaterializeAll(false);
  while (g_writer.exchange(true, std::memory_order_acq_rel)) sched_yield();
  while (g_readers.load(std::memory_order_acquire) != 0) sched_yield();
  if (Any()) {
    int hw = FdTable::HighWater();
    for (int i = 0; i < hw; ++i)
      if (Is(i)) MaterializeLocked(i);
  }
}

void UnlockForFork(bool child) {
  if (child) {
    g_readers.store(0, std::memory_order_release);
    for (auto& s : g_shard) s.store(false, std::memory_order_relaxed);
  }
  g_writer.store(false, std::memory_order_release);
}

}  // namespace fanstore::interpose::lazy
