// The client half of daemon mode: connect + handshake, readiness wait, prefetch hints, and a RemoteFetcher over
// the socket whose payloads are read in place from each connection's shared reply area.
#include "fanstore/daemon_client.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "daemon_protocol.hpp"
#include "fanstore/path_template.hpp"
#include "fanstore/protocol/fetch_cache_view.hpp"
#include "fanstore/protocol/range_check.hpp"
#include "fanstore/protocol/socket_address.hpp"
#include "owned_fd.hpp"
#include "remote_fetcher.hpp"

namespace fanstore {

namespace dp = daemon_proto;

namespace {

using FdHook = void (*)(int fd);

// How long a client spins (non-blocking receives + sched_yield) for a fetch reply before sleeping in poll: a busy
// daemon answers within microseconds, a sleeping thread takes tens of them to wake.
constexpr int kReplySpinUs = 50;

// Who keeps the fds a reply passes to us (memfds): marks them internal while held, so a fork or a close-all
// loop in the meantime is handled. Null: the fd is just closed after use.
class FdKeeper {
 public:
  virtual ~FdKeeper() = default;
  virtual void Hold(const OwnedFd& o) = 0;
  virtual void Release(const OwnedFd& o) = 0;  // closes it (if still ours)
  virtual Status AttachCache(int fd) = 0;      // the fetch cache's memfd, passed in a kCacheMap reply
};

// What no daemon starting later would change: `path` is a file, but not a socket (kInvalidArgument; else Ok).
Status NotASocket(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || S_ISSOCK(st.st_mode)) return Status::Ok();
  return Status(Code::kInvalidArgument, path + " is " + (S_ISDIR(st.st_mode) ? "a directory" : "not a socket") +
                                            ": give the --socket path the daemon was started with");
}

// Connects a CLOEXEC, non-blocking Unix stream socket to `path` into *sock (a full backlog is retried until the
// deadline). The socket is handed to `hook` (marked internal) right after it is made. A path too long for
// sun_path is reached through its directory, as the daemon binds it (SocketAddress).
Status Connect(const std::string& path, int64_t deadline_ms, FdHook hook, OwnedFd* sock) {
  const SocketAddress addr(path);
  if (!addr.fits())
    return Status(Code::kNameTooLong,
                  "daemon socket path '" + path + "' is " + std::to_string(path.size()) +
                      " bytes, more than a Unix socket path holds (" +
                      std::to_string(sizeof(sockaddr_un::sun_path) - 1) + "), and " +
                      (addr.dir_errno() != 0 ? "its directory cannot be opened to reach it (" +
                                                   std::string(std::strerror(addr.dir_errno())) + ")"
                                             : "its file name is too long to reach through its directory") +
                      ": give the socket path `fanstore serve` reported (`fanstore serve` refuses longer ones)");
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Status::FromErrno(errno, "socket for the daemon connection");
    OwnedFd o;
    if (!o.Identify(fd)) return Status::FromErrno(errno, "fstat of a new daemon socket (closed behind our back?)");
    if (hook) hook(fd);
    if (connect(fd, addr.get(), addr.size()) == 0) {
      *sock = o;
      return Status::Ok();
    }
    int err = errno;
    o.CloseIfOurs();
    if ((err == EAGAIN || err == EINTR) && dp::NowMs() < deadline_ms) {
      timespec ts{0, 2 * 1000 * 1000};
      nanosleep(&ts, nullptr);
      continue;
    }
    if (err == ECONNREFUSED)
      if (Status s = NotASocket(path); !s.ok()) return s;
    return Status(Code::kIoError,
                  "cannot connect to the fanstore daemon at " + path + ": " + std::strerror(err) +
                      (err == ENOENT         ? " (is `fanstore serve` running and ready?)"
                       : err == ECONNREFUSED ? " (no daemon listens there: the one that made it stopped "
                                               "or died; start `fanstore serve` again)"
                       : err == EACCES       ? " (the socket belongs to another user: see `fanstore "
                                               "serve --socket-mode/--group`)"
                                             : ""));
  }
}

std::string U64(uint64_t v) { return std::to_string(v); }

// A memfd the daemon passed: checks that its size is sealed (so a mapping can never fault) and that
// [offset, offset + size) lies inside it. *file_size gets its size.
Status CheckPassedMemfd(int mfd, uint64_t offset, uint64_t size, uint64_t* file_size) {
  struct stat st;
  if (fstat(mfd, &st) != 0) return Status::FromErrno(errno, "fstat of the daemon's memfd");
  if (!S_ISREG(st.st_mode)) return Status(Code::kIoError, "daemon passed an fd that is not a memfd");
  int seals = fcntl(mfd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK) || !(seals & F_SEAL_GROW))
    return Status(Code::kIoError, "daemon passed a memfd whose size is not sealed (older daemon?)");
  *file_size = static_cast<uint64_t>(st.st_size);
  if (!RangeWithin(offset, size, *file_size))
    return Status(Code::kIoError, "daemon reply claims " + U64(size) + " bytes at offset " + U64(offset) + " of a " +
                                      U64(*file_size) + "-byte memfd");
  if (*file_size > static_cast<uint64_t>(SIZE_MAX)) return Status(Code::kIoError, "daemon memfd too large to map");
  return Status::Ok();
}

// One connection to the daemon, with the read-only mapping of its reply area (null until the daemon sends one).
struct Conn {
  OwnedFd sock;
  const char* area = nullptr;
  size_t area_len = 0;
  void UnmapArea() {
    if (area) munmap(const_cast<char*>(area), area_len);
    area = nullptr;
    area_len = 0;
  }
  void Close() {
    sock.CloseIfOurs();
    UnmapArea();
  }
};

// What a reply's payload may be besides the request's type and id (checked before anything is allocated), how
// the reply is waited for, and what becomes of an fd it passes.
struct ReplyOpts {
  bool exact = false;    // an ok reply's payload_size must be exactly `payload` (fetch: the requested length)
  uint64_t payload = 0;  // otherwise the most it may be
  int spin_us = 0;       // retry the non-blocking receive this long before the first poll
  int64_t deadline_ms = 0;
  FdKeeper* keeper = nullptr;  // holds passed memfds; null: they are closed after use
};

// A reply's payload use that keeps a copy of it in *out.
RemoteFetcher::StoredUse CopyTo(std::string* out) {
  return [out](const char* d, size_t n) {
    out->assign(d, n);
    return Status::Ok();
  };
}

// Sends `r` (and `body`) on `c`, reads the reply (header, message, payload) and hands the payload to `use` (a view
// valid during the call). *consumed says whether the whole reply was read and was well-formed (the connection can
// carry the next request); a daemon-reported error is returned with its message. A reply that breaks the
// protocol's limits is kIoError and leaves *consumed false. *unanswered (if given): the connection failed before
// any reply came (a daemon that exited or restarted closed it), so the request may be sent again on another.
Status Exchange(Conn* c, const dp::Request& r, std::string_view body, const ReplyOpts& o,
                const RemoteFetcher::StoredUse& use, bool* consumed, bool* unanswered = nullptr) {
  *consumed = false;
  const int fd = c->sock.fd;
  unsigned char rb[dp::kRequestSize];
  dp::EncodeRequest(r, rb);
  Status s = dp::SendAll(fd, rb, sizeof rb, o.deadline_ms);
  if (s.ok() && !body.empty()) s = dp::SendAll(fd, body.data(), body.size(), o.deadline_ms);
  if (!s.ok()) {
    if (unanswered) *unanswered = s.code() == Code::kIoError;
    return s;
  }
  unsigned char hb[dp::kReplyHeaderSize];
  int passed = -1;
  s = dp::RecvAll(fd, hb, sizeof hb, o.deadline_ms, &passed, o.spin_us);
  if (unanswered) *unanswered = s.code() == Code::kIoError && passed < 0;
  OwnedFd held;
  if (passed >= 0) {
    if (!held.Identify(passed)) {
      // Only possible when another thread closed it in between; the number is not ours to touch any more.
      passed = -1;
      if (s.ok()) s = Status(Code::kIoError, "the daemon's payload fd vanished before it could be read");
    } else if (o.keeper) {
      o.keeper->Hold(held);
    }
  }
  auto release = [&] {
    if (passed < 0) return;
    if (o.keeper) o.keeper->Release(held);
    else held.CloseIfOurs();
    passed = -1;
  };
  dp::ReplyHeader h;
  if (s.ok() && (!dp::DecodeReplyHeader(hb, &h) || h.req_id != r.req_id || h.type != r.type))
    s = Status(Code::kIoError, "daemon sent a malformed or out-of-order reply (fanstore version mismatch?)");
  if (s.ok() && h.msg_len > dp::kMaxReplyMessage)
    s = Status(Code::kIoError, "daemon reply carries a " + U64(h.msg_len) + "-byte message (at most " +
                                   U64(dp::kMaxReplyMessage) + " allowed)");
  // An error reply carries no payload.
  const uint64_t want = h.code == Code::kOk ? o.payload : 0;
  if (s.ok() && (o.exact ? h.payload_size != want : h.payload_size > o.payload))
    s = Status(Code::kIoError, "daemon reply carries " + U64(h.payload_size) + " payload bytes, expected " +
                                   (o.exact ? "" : "at most ") + U64(o.exact ? want : o.payload));
  const bool in_area = s.ok() && (h.flags & dp::kPayloadInArea);
  const bool in_memfd = s.ok() && (h.flags & dp::kPayloadInMemfd);
  const bool new_area = s.ok() && (h.flags & dp::kNewArea);
  const bool cache_fd = s.ok() && (h.flags & dp::kCacheMemfd);
  const bool fd_announced = new_area || in_memfd || cache_fd;
  if (s.ok() && in_area && in_memfd) s = Status(Code::kIoError, "daemon reply names two payload places");
  if (s.ok() && cache_fd && (new_area || in_memfd || r.type != dp::MsgType::kCacheMap || !o.keeper))
    s = Status(Code::kIoError, "daemon passed a cache memfd in the wrong reply");
  if (s.ok() && fd_announced != (passed >= 0))
    s = Status(Code::kIoError, fd_announced ? "daemon announced a shared-memory payload but passed no fd"
                                            : "daemon passed an fd it did not announce");
  std::string msg;
  if (s.ok() && h.msg_len > 0) {
    msg.resize(h.msg_len);
    s = dp::RecvAll(fd, msg.data(), msg.size(), o.deadline_ms, nullptr);
  }
  if (s.ok() && new_area) {
    uint64_t len = 0;
    s = CheckPassedMemfd(passed, 0, 0, &len);
    if (s.ok() && len == 0) s = Status(Code::kIoError, "daemon passed an empty reply area");
    void* m = s.ok() ? mmap(nullptr, static_cast<size_t>(len), PROT_READ, MAP_SHARED, passed, 0) : MAP_FAILED;
    if (s.ok() && m == MAP_FAILED) s = Status::FromErrno(errno, "mmap of the daemon's reply area");
    if (s.ok()) {
      c->UnmapArea();
      c->area = static_cast<const char*>(m);
      c->area_len = static_cast<size_t>(len);
    }
    release();  // the mapping keeps the area alive: no fd is held for it
  }
  if (s.ok() && cache_fd) {
    s = o.keeper->AttachCache(passed);
    release();
  }
  Status used;
  if (s.ok() && in_area) {
    if (!RangeWithin(h.shm_offset, h.payload_size, c->area_len))
      s = Status(Code::kIoError, "daemon reply claims " + U64(h.payload_size) + " bytes at offset " +
                                     U64(h.shm_offset) + " of a " + U64(c->area_len) + "-byte reply area");
    else if (h.code == Code::kOk) used = use(c->area + h.shm_offset, static_cast<size_t>(h.payload_size));
  } else if (s.ok() && in_memfd) {
    uint64_t len = 0;
    s = CheckPassedMemfd(passed, h.shm_offset, h.payload_size, &len);
    if (s.ok() && h.code == Code::kOk) {
      void* m = h.payload_size ? mmap(nullptr, static_cast<size_t>(len), PROT_READ, MAP_SHARED, passed, 0) : nullptr;
      if (m == MAP_FAILED) {
        s = Status::FromErrno(errno, "mmap of the daemon's payload");
      } else {
        used = use(static_cast<const char*>(m) + h.shm_offset, static_cast<size_t>(h.payload_size));
        if (m) munmap(m, static_cast<size_t>(len));
      }
    }
  } else if (s.ok()) {
    std::string payload;
    try {
      payload.resize(h.payload_size);  // bounded by the checks above
    } catch (...) {
      s = Status(Code::kNoMemory, "out of memory for a " + U64(h.payload_size) + "-byte reply");
    }
    if (s.ok() && h.payload_size > 0) s = dp::RecvAll(fd, payload.data(), payload.size(), o.deadline_ms, nullptr);
    if (s.ok() && h.code == Code::kOk) used = use(payload.data(), payload.size());
  }
  release();
  if (!s.ok()) return s;
  *consumed = true;
  if (h.code != Code::kOk) return Status(h.code, "daemon: " + msg);
  return used;
}

// Sends a hello on a fresh connection and decodes the daemon's answer.
Status Handshake(Conn* c, int64_t deadline_ms, DaemonInfo* info, FdKeeper* keeper) {
  std::string payload;
  bool consumed = false;
  Status s = Exchange(c, {.type = dp::MsgType::kHello, .req_id = 1, .part = dp::kHelloAsksUnstaged}, {},
                      {.payload = dp::kMaxHelloPayload, .deadline_ms = deadline_ms, .keeper = keeper}, CopyTo(&payload),
                      &consumed);
  if (!s.ok()) return s;
  dp::HelloInfo h;
  if (!dp::DecodeHello(payload, &h)) return Status(Code::kIoError, "daemon sent a malformed hello");
  info->rank = h.rank;
  info->nranks = h.nranks;
  info->timeout_ms = h.timeout_ms;
  info->staged = (h.flags & dp::kHelloStaged) != 0;
  info->staging_failed = (h.flags & dp::kHelloStagingFailed) != 0;
  info->unstaged_ranks = h.unstaged;
  info->index_dir = h.index_dir;
  info->partition_dir = h.partition_dir;
  return Status::Ok();
}

class DaemonFetcher final : public RemoteFetcher, private FdKeeper {
 public:
  DaemonFetcher(std::string path, int timeout_ms) : path_(std::move(path)), timeout_ms_(timeout_ms) {}
  ~DaemonFetcher() override {
    DropPoolLocked();
    if (cache_fd_.load(std::memory_order_acquire) >= 0) cache_fd_id_.CloseIfOurs();
  }

  bool CachesNodeWide() override { return SharedCache() != nullptr; }

  // Copies a cached range with pread on our descriptor of the cache memfd (cache_fd_), or through the mapping once
  // that descriptor is no longer ours or pread failed; either way the slot's sequence says whether the bytes changed
  // meanwhile. The descriptor's identity is checked (one fstat, cheap against the copy) before each pread, so the
  // bytes never come from the program's file.
  bool CopyCached(uint32_t part, uint64_t offset, uint64_t length, char* dst) override {
    const fetch_cache_view::View* v = SharedCache();
    if (!v) return false;
    const int fd = cache_fd_.load(std::memory_order_acquire);
    if (fd >= 0 && cache_fd_id_.StillOurs()) {
      int err = 0;
      bool ok = v->CopyWith(part, offset, length, [&](uint64_t d) {
        ssize_t n = pread(fd, dst, static_cast<size_t>(length), static_cast<off_t>(v->data_offset() + d));
        err = n < 0 ? errno : n != static_cast<ssize_t>(length) ? EIO : 0;
        return err == 0;
      });
      if (err == 0 || err == EFAULT) return ok;  // EFAULT: the caller's buffer, not the descriptor
    }
    // Not ours any more, or pread failed on it: never read or closed by us again; the mapping from now on.
    if (fd >= 0) cache_fd_.store(-1, std::memory_order_release);
    return v->Copy(part, offset, length, dst);
  }

  Status WithStored(uint32_t part, uint64_t offset, uint64_t length, const StoredUse& use) override {
    // The fetch cache first: a range cached there is copied out here, without a daemon round-trip (into a buffer
    // of ours: `use` must only see bytes that did not change while being copied).
    if (SharedCache()) {
      thread_local std::vector<char> copy;
      if (copy.size() < length) copy.resize(length);
      if (CopyCached(part, offset, length, copy.data())) return use(copy.data(), static_cast<size_t>(length));
    }
    return Fetch(part, offset, length, 0, use);
  }

  Status WithSourceBytes(uint32_t part, uint64_t offset, uint64_t length, const StoredUse& use) override {
    return Fetch(part, offset, length, dp::kFromSource, use);
  }

  Status Fetch(uint32_t part, uint64_t offset, uint64_t length, uint32_t flags, const StoredUse& use) {
    bool connected = false, got = false;
    Status s = Call(
        {.type = dp::MsgType::kFetch, .part = part, .offset = offset, .length = length, .flags = flags}, {},
        {.exact = true, .payload = length, .spin_us = kReplySpinUs},
        [&](const char* d, size_t n) {
          got = true;
          return use(d, n);
        },
        &connected);
    // Every ok reply reached `use`: its verdict (e.g. a checksum mismatch) and a failed connect come back as they are.
    if (got || !connected) return s;
    return Status(s.code(), "partition " + U64(part) + " bytes " + U64(offset) + "+" + U64(length) + " via " + path_ +
                                ": " + s.message());
  }

  Result<dp::PrefetchCounts> Prefetch(uint64_t stream, bool append, std::string_view body) {
    std::string payload;
    Status s = Call(
        {.type = dp::MsgType::kPrefetch, .stream = stream, .flags = append ? dp::kAppend : 0u, .body_len = body.size()},
        body, {.payload = dp::kPrefetchReplySize}, CopyTo(&payload));
    if (!s.ok()) return s;
    dp::PrefetchCounts counts;
    if (!dp::DecodePrefetchCounts(payload, &counts))
      return Status(Code::kIoError, "daemon sent a malformed prefetch reply");
    return counts;
  }

  void SetInternalFdHook(FdHook hook) override {
    AdoptIfForked();
    std::lock_guard<std::mutex> g(mu_);
    hook_.store(hook, std::memory_order_release);
    if (hook == nullptr) return;
    for (auto& c : all_)
      if (c->sock.StillOurs()) hook(c->sock.fd);
    for (const OwnedFd& m : held_)
      if (m.StillOurs()) hook(m.fd);
    if (cache_fd_.load(std::memory_order_acquire) >= 0 && cache_fd_id_.StillOurs()) hook(cache_fd_id_.fd);
  }

  // The forking thread holds mu_ across fork(), so the child never inherits a half-updated pool.
  void AtForkPrepare() override {
    AdoptIfForked();
    cache_mu_.lock();  // (SharedCache takes cache_mu_, then mu_)
    mu_.lock();
    fork_locked_ = true;
  }
  void AtForkParent() override {
    fork_locked_ = false;
    mu_.unlock();
    cache_mu_.unlock();
  }
  void AfterForkChild() override {
    if (fork_locked_) {
      fork_locked_ = false;
      mu_.unlock();  // the forking thread's locks (the child's only thread)
      cache_mu_.unlock();
    }
    // owner_ names the parent: the inherited pool is dropped, and the locks (which, without a prepare hook, a
    // thread that does not exist here may have held) are made afresh.
    AdoptIfForked();
  }

 private:
  // The fetch cache's shared view, asked for once (null: the daemon has none, or it failed).
  const fetch_cache_view::View* SharedCache() {
    if (int st = cache_state_.load(std::memory_order_acquire)) return st == 1 ? &view_ : nullptr;
    AdoptIfForked();
    std::lock_guard<std::mutex> g(cache_mu_);
    if (int st = cache_state_.load(std::memory_order_relaxed)) return st == 1 ? &view_ : nullptr;
    bool connected = false;
    Status s = Call(
        {.type = dp::MsgType::kCacheMap}, {}, {}, [](const char*, size_t) { return Status::Ok(); }, &connected);
    if (!connected) return nullptr;  // asked again next time
    const bool ok = s.ok() && view_.attached();
    cache_state_.store(ok ? 1 : 2, std::memory_order_release);
    return ok ? &view_ : nullptr;
  }

  // The fetch cache's memfd the daemon passed (closed by the caller): mapped into view_ read-only, but for its hit
  // counters, for the life of the process (forked children share it); a duplicate is kept for CopyCached, marked
  // internal under mu_ (as SetInternalFdHook marks what we hold).
  Status AttachCache(int passed) override {
    uint64_t size = 0;
    Status s = CheckPassedMemfd(passed, 0, 0, &size);
    if (!s.ok()) return s;
    void* ro = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, passed, 0);
    if (ro == MAP_FAILED) return Status::FromErrno(errno, "mmap of the fetch cache");
    uint64_t hoff = 0, hlen = 0;
    void* hits = MAP_FAILED;
    if (fetch_cache_view::View::HitsRange(static_cast<const char*>(ro), size, &hoff, &hlen))
      hits = mmap(nullptr, static_cast<size_t>(hlen), PROT_READ | PROT_WRITE, MAP_SHARED, passed,
                  static_cast<off_t>(hoff));
    if (hits == MAP_FAILED || !view_.Attach(static_cast<char*>(ro), size, static_cast<char*>(hits))) {
      munmap(ro, static_cast<size_t>(size));
      if (hits != MAP_FAILED) munmap(hits, static_cast<size_t>(hlen));
      return Status(Code::kIoError, "the daemon's fetch cache has an unknown layout (fanstore version mismatch?)");
    }
    int fd = fcntl(passed, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return s;
    OwnedFd id;
    if (!id.Identify(fd)) {
      close(fd);
      return s;
    }
    std::lock_guard<std::mutex> g(mu_);
    if (FdHook hook = hook_.load(std::memory_order_acquire)) hook(fd);
    cache_fd_id_ = id;
    cache_fd_.store(fd, std::memory_order_release);
    return s;
  }

  // Sends `r` (a fresh req_id) and `body` on a pooled connection and hands the reply's payload to `use`, which runs
  // while we hold the connection (the area's bytes stay put until our next request on it). A socket failure, a
  // timeout or a malformed reply leaves the stream at an unknown position (a late reply may still arrive), so that
  // connection is dropped; a daemon-reported error was read completely and the connection is reused. *connected:
  // a connection was had.
  //
  // A daemon that let a request (or a new connection's hello) wait out --timeout is taken for stopped or hung: for
  // the next --timeout every request fails at once, rather than each waiting its own (a file of 4 chunks waited 7
  // of them, and a fresh process 3 per chunk).
  //
  // An idle connection the daemon closed meanwhile (it exited, or was restarted) fails before any reply: the
  // request goes once more on a fresh connection, and the other idle ones, as old, are dropped.
  Status Call(dp::Request r, std::string_view body, ReplyOpts o, const StoredUse& use, bool* connected = nullptr) {
    const int64_t now = dp::NowMs();
    if (now < silent_until_ms_.load(std::memory_order_relaxed))
      return Status(Code::kTimeout, "the fanstore daemon at " + path_ + " let a request wait out its --timeout (" +
                                        std::to_string(timeout_ms_) +
                                        " ms) a moment ago: stopped or hung? (failing at once for that long)");
    o.deadline_ms = now + timeout_ms_;
    o.keeper = this;
    for (bool again = true;;) {
      bool reused = false;
      auto taken = Take(o.deadline_ms, &reused);
      if (connected) *connected = taken.ok();
      if (!taken.ok()) {
        if (taken.status().code() == Code::kTimeout || dp::NowMs() >= o.deadline_ms) Silence();
        return taken.status();
      }
      r.req_id = next_id_.fetch_add(1, std::memory_order_relaxed);
      bool consumed = false, unanswered = false;
      Status s = Exchange(*taken, r, body, o, use, &consumed, &unanswered);
      Give(*taken, consumed);
      if (reused && unanswered && again) {
        again = false;
        DropIdle();
        continue;
      }
      // (consumed: a whole reply came, a daemon-reported timeout included.)
      if (!consumed && s.code() == Code::kTimeout) Silence();
      return s;
    }
  }

  void Silence() { silent_until_ms_.store(dp::NowMs() + timeout_ms_, std::memory_order_relaxed); }

  // Closes the idle connections (a daemon that closed one has closed them all).
  void DropIdle() {
    std::lock_guard<std::mutex> g(mu_);
    for (Conn* c : std::exchange(idle_, {})) EraseLocked(c);  // (a number no longer ours is not closed)
  }

  // Called before an exchange (Take) and by the other entry points that take mu_ or cache_mu_. In a child forked
  // without the AtFork hooks (a raw clone), either may have been held by a parent thread that does not exist here:
  // one thread of the child re-creates them and drops the inherited connections; the others wait for it. owner_ is
  // the owning pid, or minus the pid of a process adopting (a parent forked mid-adoption leaves the child a foreign
  // negative pid: taken over).
  void AdoptIfForked() {
    const pid_t me = getpid();
    for (;;) {
      pid_t o = owner_.load(std::memory_order_acquire);
      if (o == me) return;
      if (o == -me) {
        sched_yield();  // another thread of this process is adopting
        continue;
      }
      if (!owner_.compare_exchange_strong(o, -me, std::memory_order_acq_rel)) continue;
      new (&mu_) std::mutex;
      new (&cache_mu_) std::mutex;
      fork_locked_ = false;
      {
        std::lock_guard<std::mutex> g(mu_);
        DropPoolLocked();
      }
      owner_.store(me, std::memory_order_release);
      return;
    }
  }

  // Closes every connection (unmapping its area) and held memfd whose number is still ours, and forgets them all:
  // on destruction, and in a child, whose inherited connections carry the parent's conversations and must never be
  // talked on (the parent keeps its own; closing ours lets the daemon see EOF once the parent drops one). A
  // connection another thread was using at fork time is not in idle_ but is in all_. New ones come lazily.
  void DropPoolLocked() {
    for (auto& c : all_) c->Close();
    for (const OwnedFd& m : held_) m.CloseIfOurs();
    all_.clear();
    idle_.clear();
    held_.clear();
    ++generation_;
  }

  void Hold(const OwnedFd& o) override {
    FdHook hook = hook_.load(std::memory_order_acquire);
    if (hook) hook(o.fd);
    std::lock_guard<std::mutex> g(mu_);
    held_.push_back(o);
  }

  void Release(const OwnedFd& o) override {
    std::lock_guard<std::mutex> g(mu_);
    for (size_t i = 0; i < held_.size(); ++i)
      if (held_[i].fd == o.fd && held_[i].ino == o.ino && held_[i].dev == o.dev) {
        held_[i] = held_.back();
        held_.pop_back();
        o.CloseIfOurs();
        return;
      }
    // Not found: dropped by a fork-without-hooks cleanup; nothing of ours to close.
  }

  // Closes `c` and removes (frees) it; nothing when it is not in the pool (dropped by a fork meanwhile).
  void EraseLocked(Conn* c) {
    for (size_t i = 0; i < all_.size(); ++i)
      if (all_[i].get() == c) {
        c->Close();
        all_[i] = std::move(all_.back());
        all_.pop_back();
        return;
      }
  }

  // A connection for one exchange: an idle one (*reused), else a new one, connected and greeted by `deadline`.
  Result<Conn*> Take(int64_t deadline, bool* reused) {
    uint64_t gen;
    // Forked without the AtFork hooks: never talk on the parent's connections (replies would be split
    // between two processes); drop our copies and connect afresh. Every exchange starts here, so the calls
    // made during it (Hold, Release, Give) run in a process that has already adopted the pool.
    AdoptIfForked();
    {
      std::lock_guard<std::mutex> g(mu_);
      while (!idle_.empty()) {
        Conn* c = idle_.back();
        idle_.pop_back();
        if (c->sock.StillOurs()) {
          *reused = true;
          return c;
        }
        // The number was closed behind our back and may now be the program's file or socket: never send on
        // it, never close it; just forget it.
        c->sock.fd = -1;
        EraseLocked(c);
      }
      gen = generation_;
    }
    auto conn = std::make_unique<Conn>();
    DaemonInfo info;
    Status s = Connect(path_, deadline, hook_.load(std::memory_order_acquire), &conn->sock);
    if (s.ok()) s = Handshake(conn.get(), deadline, &info, this);
    if (!s.ok()) {
      conn->Close();
      return s;
    }
    std::lock_guard<std::mutex> g(mu_);
    if (gen != generation_ || owner_.load(std::memory_order_acquire) != getpid()) {
      conn->Close();
      return Status(Code::kIoError, "daemon connection pool was reset while connecting (fork?)");
    }
    all_.push_back(std::move(conn));
    return all_.back().get();
  }

  void Give(Conn* c, bool reusable) {
    std::lock_guard<std::mutex> g(mu_);
    if (!reusable) {
      EraseLocked(c);
      return;
    }
    for (auto& k : all_)
      if (k.get() == c) {
        idle_.push_back(c);  // (not found: the pool was dropped by a fork meanwhile)
        return;
      }
  }

  const std::string path_;
  const int timeout_ms_;
  std::atomic<int64_t> silent_until_ms_{0};  // Call fails at once before this (the daemon let a request time out)
  std::mutex mu_;
  std::vector<std::unique_ptr<Conn>> all_;  // every connection this process owns (idle or in use)
  std::vector<Conn*> idle_;                 // connected, handshaken, no request in flight
  std::vector<OwnedFd> held_;               // memfds passed by the daemon, held while read
  std::atomic<FdHook> hook_{nullptr};       // marks our fds internal (the interposer's close-all protection)
  std::mutex cache_mu_;                     // asking for the fetch cache (not mu_: Take takes that)
  std::atomic<int> cache_state_{0};         // 0 not asked yet, 1 view_ attached, 2 none
  fetch_cache_view::View view_;
  // A descriptor of the fetch cache's memfd, kept for pread (-1: none, or it stopped working). pread copies in the
  // kernel as a local file's read does; through the mapping, every process (a DataLoader's fresh workers, each
  // epoch) would first fault in the page-table entries of each page it touches: about 15% slower per epoch.
  std::atomic<int> cache_fd_{-1};
  OwnedFd cache_fd_id_;       // its identity (set before cache_fd_ is published)
  bool fork_locked_ = false;  // AtForkPrepare holds mu_
  uint64_t generation_ = 0;
  std::atomic<uint64_t> next_id_{2};    // 1 is the hello
  std::atomic<pid_t> owner_{getpid()};  // the process the connections in all_ belong to (AdoptIfForked)
};

}  // namespace

Result<DaemonInfo> ProbeDaemon(const std::string& socket_path, int timeout_ms) {
  const int64_t deadline = dp::NowMs() + timeout_ms;
  Conn c;
  Status s = Connect(socket_path, deadline, nullptr, &c.sock);
  if (!s.ok()) return s;
  DaemonInfo info;
  s = Handshake(&c, deadline, &info, nullptr);
  c.Close();
  if (s.code() == Code::kTimeout) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f s", timeout_ms / 1000.0);
    return Status(s.code(), "the fanstore daemon at " + socket_path + " did not answer within " + secs +
                                " (stopped, or too busy to answer: check its `fanstore serve`)");
  }
  if (!s.ok()) return Status(s.code(), "fanstore daemon at " + socket_path + ": " + s.message());
  return info;
}

Status WaitForDaemon(const std::string& socket_path, int timeout_ms, bool staged) {
  const int64_t deadline = dp::NowMs() + timeout_ms;
  // What to report when time runs out: the last answer that said something (a refusal, a wrong image), not a
  // probe that merely ran out of time because it started just before the deadline.
  Status why(Code::kTimeout, "no answer");
  for (;;) {
    // What no daemon starting later would change: a file that is not a socket, a path no socket can have.
    if (Status s = NotASocket(socket_path); !s.ok()) return s;
    // One probe even when no time is left (--timeout 0: is it ready now?).
    auto r = ProbeDaemon(socket_path, static_cast<int>(std::clamp<int64_t>(deadline - dp::NowMs(), 100, 1000)));
    if (r.ok() && (!staged || r->staged)) return Status::Ok();
    if (!r.ok() && r.status().code() == Code::kNameTooLong) return r.status();
    if (r.ok() && staged && r->staging_failed)  // waiting longer cannot help
      return Status(Code::kIoError, "daemon at " + socket_path +
                                        " will not be staged: staging failed on some ranks (each says why in its "
                                        "log); what they did not stage is read from the other replicas or the "
                                        "image directory");
    if (r.ok() && !r->unstaged_ranks.empty()) {
      // Staging will not complete: waiting longer cannot help.
      std::string ranks;
      for (uint32_t k : r->unstaged_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(k);
      const bool one = r->unstaged_ranks.size() == 1;
      return Status(Code::kIoError,
                    "daemon at " + socket_path + " will not be staged: rank" + (one ? " " : "s ") + ranks +
                        (one ? " is" : " are") + " down (died or stopped answering before reporting staging); " +
                        (one ? "its" : "their") + " partitions are not staged on " +
                        (one ? "its node" : "their nodes") +
                        " and are read from the other replicas or the image directory, while every other rank has "
                        "staged its own");
    }
    if (r.ok()) why = Status(Code::kTimeout, "serving, still staging");
    else if (r.status().code() != Code::kTimeout || why.code() == Code::kTimeout) why = r.status();
    if (dp::NowMs() >= deadline)
      return Status(Code::kTimeout, "daemon at " + socket_path + " not " + (staged ? "staged" : "ready") + " after " +
                                        std::to_string(timeout_ms) + " ms: " + why.message());
    const int64_t nap_ms = std::min<int64_t>(100, std::max<int64_t>(deadline - dp::NowMs(), 0));
    timespec ts{0, static_cast<long>(nap_ms) * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
}

Result<std::shared_ptr<RemoteFetcher>> ConnectDaemonFetcher(const std::string& socket_template, DaemonInfo* info) {
  // "{node}" here too, not only in the front ends: FANSTORE_DAEMON set by hand (a job script with LD_PRELOAD)
  // must reach this node's daemon when several virtual nodes share a host.
  auto socket_path = ExpandNodeTemplate(socket_template);
  if (!socket_path.ok()) return socket_path.status();
  // A relative path, from where this process starts: later connections must reach the same socket after a chdir
  // (the mount's daemonizing goes to "/").
  if (char cwd[PATH_MAX]; !socket_path->empty() && (*socket_path)[0] != '/' && getcwd(cwd, sizeof cwd))
    *socket_path = std::string(cwd) + "/" + *socket_path;
  auto r = ProbeDaemon(*socket_path, 5000);
  if (!r.ok()) return r.status();
  *info = *r;
  int timeout = info->timeout_ms > 0 ? static_cast<int>(info->timeout_ms) : 5000;
  return std::shared_ptr<RemoteFetcher>(std::make_shared<DaemonFetcher>(*socket_path, timeout));
}

Result<PrefetchResult> SendPrefetchHint(const std::string& socket_path, const std::vector<std::string>& paths,
                                        uint64_t stream, int timeout_ms) {
  DaemonFetcher f(socket_path, timeout_ms);
  PrefetchResult total;
  std::string body;
  bool append = false;
  auto flush = [&]() -> Status {
    auto r = f.Prefetch(stream, append, body);
    if (!r.ok()) return r.status();
    total.remote += r->remote;
    total.local += r->local;
    total.missing += r->missing;
    total.remote_bytes += r->remote_bytes;
    body.clear();
    append = true;  // the following pieces extend the stream the first one replaced
    return Status::Ok();
  };
  for (const std::string& p : paths) {
    if (p.find('\n') != std::string::npos)
      return Status(Code::kInvalidArgument, "prefetch path contains a newline: " + p);
    if (!body.empty() && body.size() + p.size() + 1 > dp::kMaxPrefetchBody) {
      Status s = flush();
      if (!s.ok()) return s;
    }
    body += p;
    body += '\n';
  }
  if (!body.empty() || !append) {
    Status s = flush();
    if (!s.ok()) return s;
  }
  return total;
}

}  // namespace fanstore
