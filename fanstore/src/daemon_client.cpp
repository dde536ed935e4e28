// The client half of daemon mode: connect + handshake, readiness wait, and a RemoteFetcher over the socket.
#include "fanstore/daemon_client.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "daemon_protocol.hpp"

namespace fanstore {

namespace dp = daemon_proto;

namespace {

using FdHook = void (*)(int fd);

// An fd number together with the identity of the open file it named when we got it. Before we reuse or close
// a number, we check it still names that file: the program may have closed it behind our back (a close-all
// loop the interposer could not see, a raw syscall) and reused the number for its own file or socket.
struct OwnedFd {
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
};

bool Identify(int fd, OwnedFd* o) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  o->fd = fd;
  o->dev = st.st_dev;
  o->ino = st.st_ino;
  return true;
}

bool StillOurs(const OwnedFd& o) {
  struct stat st;
  return o.fd >= 0 && fstat(o.fd, &st) == 0 && st.st_dev == o.dev && st.st_ino == o.ino;
}

// Closes o.fd only when it still names our file; otherwise the number is someone else's now: forget it.
void CloseIfOurs(const OwnedFd& o) {
  if (StillOurs(o)) close(o.fd);
}

// Who keeps the fds a reply passes to us (memfds): marks them internal while held, so a fork or a close-all
// loop in the meantime is handled. Null: the fd is just closed after use.
class FdKeeper {
 public:
  virtual ~FdKeeper() = default;
  virtual void Hold(const OwnedFd& o) = 0;
  virtual void Release(const OwnedFd& o) = 0;  // closes it (if still ours)
};

// Connects a CLOEXEC, non-blocking Unix stream socket to `path` (a full backlog is retried until the deadline).
// The socket is handed to `hook` (marked internal) right after it is made, and identified in *id.
Result<int> Connect(const std::string& path, int64_t deadline_ms, FdHook hook, OwnedFd* id) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return Status(Code::kNameTooLong, "daemon socket path '" + path + "' is longer than " +
                                          std::to_string(sizeof addr.sun_path - 1) + " bytes");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Status::FromErrno(errno, "socket for the daemon connection");
    OwnedFd o;
    if (!Identify(fd, &o)) {
      int err = errno;
      return Status::FromErrno(err, "fstat of a new daemon socket (closed behind our back?)");
    }
    if (hook) hook(fd);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      if (id) *id = o;
      return fd;
    }
    int err = errno;
    CloseIfOurs(o);
    if ((err == EAGAIN || err == EINTR) && dp::NowMs() < deadline_ms) {
      timespec ts{0, 2 * 1000 * 1000};
      nanosleep(&ts, nullptr);
      continue;
    }
    return Status(Code::kIoError, "cannot connect to the fanstore daemon at " + path + ": " + std::strerror(err) +
                                      (err == ENOENT ? " (is `fanstore serve` running and ready?)" : ""));
  }
}

std::string U64(uint64_t v) { return std::to_string(v); }

// Copies payload_size bytes at shm_offset of the passed memfd `mfd` into *payload, after checking that they lie
// inside the file and that its size is sealed (so the mapping can never fault).
Status CopyFromMemfd(int mfd, uint64_t offset, uint64_t size, std::string* payload) {
  struct stat st;
  if (fstat(mfd, &st) != 0) return Status::FromErrno(errno, "fstat of the daemon's payload memfd");
  if (!S_ISREG(st.st_mode)) return Status(Code::kIoError, "daemon passed an fd that is not a memfd");
  int seals = fcntl(mfd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    return Status(Code::kIoError, "daemon passed a payload memfd whose size is not sealed (older daemon?)");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (offset > file_size || size > file_size - offset)  // overflow-safe: offset + size <= file_size
    return Status(Code::kIoError, "daemon reply claims " + U64(size) + " bytes at offset " + U64(offset) +
                                      " of a " + U64(file_size) + "-byte memfd");
  payload->clear();
  if (size == 0) return Status::Ok();
  const uint64_t len = offset + size;
  if (len > static_cast<uint64_t>(SIZE_MAX)) return Status(Code::kIoError, "daemon payload too large to map");
  void* m = mmap(nullptr, static_cast<size_t>(len), PROT_READ, MAP_SHARED, mfd, 0);
  if (m == MAP_FAILED) return Status::FromErrno(errno, "mmap of the daemon's payload");
  try {
    payload->assign(static_cast<const char*>(m) + offset, static_cast<size_t>(size));
  } catch (...) {
    munmap(m, static_cast<size_t>(len));
    return Status(Code::kNoMemory, "out of memory for a " + U64(size) + "-byte payload");
  }
  munmap(m, static_cast<size_t>(len));
  return Status::Ok();
}

// What a reply to one request may look like; checked before anything is allocated.
struct ReplyExpect {
  dp::MsgType type = dp::MsgType::kFetch;
  uint64_t req_id = 0;
  bool exact = false;       // payload_size must be 0 or exactly `payload` (fetch: the entry's stored size)
  uint64_t payload = 0;     // otherwise the most it may be
};

// Reads one reply (header, message, payload) for `ex`. *consumed says whether the whole reply was read and was
// well-formed (the connection can carry the next request); a daemon-reported error is returned with its
// message. A reply that breaks the protocol's limits is kIoError and leaves *consumed false.
Status ReadReply(int fd, const ReplyExpect& ex, int64_t deadline_ms, std::string* payload, bool* consumed,
                 FdKeeper* keeper, FdHook hook) {
  *consumed = false;
  unsigned char hb[dp::kReplyHeaderSize];
  int passed = -1;
  Status s = dp::RecvAll(fd, hb, sizeof hb, deadline_ms, &passed);
  OwnedFd held;
  if (passed >= 0) {
    if (!Identify(passed, &held)) {
      // Only possible when another thread closed it in between; the number is not ours to touch any more.
      passed = -1;
      if (s.ok()) s = Status(Code::kIoError, "the daemon's payload fd vanished before it could be read");
    } else if (keeper) {
      keeper->Hold(held);
    } else if (hook) {
      hook(passed);
    }
  }
  dp::ReplyHeader h;
  if (s.ok() && (!dp::DecodeReplyHeader(hb, &h) || h.req_id != ex.req_id || h.type != ex.type))
    s = Status(Code::kIoError, "daemon sent a malformed or out-of-order reply (version mismatch?)");
  if (s.ok() && h.msg_len > dp::kMaxReplyMessage)
    s = Status(Code::kIoError, "daemon reply carries a " + U64(h.msg_len) + "-byte message (at most " +
                                   U64(dp::kMaxReplyMessage) + " allowed)");
  if (s.ok() && (ex.exact ? (h.payload_size != 0 && h.payload_size != ex.payload) : h.payload_size > ex.payload))
    s = Status(Code::kIoError, "daemon reply carries " + U64(h.payload_size) + " payload bytes, expected " +
                                   (ex.exact ? "" : "at most ") + U64(ex.payload));
  const bool in_memfd = s.ok() && (h.flags & dp::kPayloadInMemfd);
  if (s.ok() && in_memfd && passed < 0)
    s = Status(Code::kIoError, "daemon announced a shared-memory payload but passed no fd");
  std::string msg;
  if (s.ok() && h.msg_len > 0) {
    msg.resize(h.msg_len);
    s = dp::RecvAll(fd, msg.data(), msg.size(), deadline_ms, nullptr);
  }
  if (s.ok() && in_memfd) {
    s = CopyFromMemfd(passed, h.shm_offset, h.payload_size, payload);
  } else if (s.ok()) {
    payload->resize(h.payload_size);  // bounded by the checks above
    if (h.payload_size > 0) s = dp::RecvAll(fd, payload->data(), payload->size(), deadline_ms, nullptr);
  }
  if (passed >= 0) {
    if (keeper) keeper->Release(held);
    else CloseIfOurs(held);
  }
  if (!s.ok()) return s;
  *consumed = true;
  if (h.code != Code::kOk) return Status(h.code, "daemon: " + msg);
  return Status::Ok();
}

// Sends a hello on a fresh connection and decodes the daemon's answer.
Status Handshake(int fd, int64_t deadline_ms, DaemonInfo* info, FdKeeper* keeper, FdHook hook) {
  unsigned char rb[dp::kRequestSize];
  dp::EncodeRequest({dp::MsgType::kHello, 1, 0}, rb);
  Status s = dp::SendAll(fd, rb, sizeof rb, deadline_ms);
  std::string payload;
  bool consumed = false;
  ReplyExpect ex;
  ex.type = dp::MsgType::kHello;
  ex.req_id = 1;
  ex.payload = dp::kMaxHelloPayload;
  if (s.ok()) s = ReadReply(fd, ex, deadline_ms, &payload, &consumed, keeper, hook);
  if (!s.ok()) return s;
  dp::HelloInfo h;
  if (!dp::DecodeHello(payload, &h)) return Status(Code::kIoError, "daemon sent a malformed hello");
  info->rank = h.rank;
  info->nranks = h.nranks;
  info->timeout_ms = h.timeout_ms;
  info->index_dir = h.index_dir;
  info->partition_dir = h.partition_dir;
  return Status::Ok();
}

class DaemonFetcher final : public RemoteFetcher, private FdKeeper {
 public:
  DaemonFetcher(std::string path, int timeout_ms) : path_(std::move(path)), timeout_ms_(timeout_ms) {}
  ~DaemonFetcher() override {
    for (const OwnedFd& c : all_) CloseIfOurs(c);
    for (const OwnedFd& m : held_) CloseIfOurs(m);
  }

  Status FetchStored(const Entry& e, std::string* out) override {
    int64_t deadline = dp::NowMs() + timeout_ms_;
    auto conn = Take(deadline);
    if (!conn.ok())
      return Status(conn.status().code(), "remote read of " + std::string(e.path) + ": " + conn.status().message());
    const int fd = conn->fd;
    uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    unsigned char rb[dp::kRequestSize];
    dp::EncodeRequest({dp::MsgType::kFetch, id, e.id}, rb);
    Status s = dp::SendAll(fd, rb, sizeof rb, deadline);
    bool consumed = false;
    ReplyExpect ex;
    ex.type = dp::MsgType::kFetch;
    ex.req_id = id;
    ex.exact = true;
    ex.payload = e.stored_size;
    if (s.ok()) s = ReadReply(fd, ex, deadline, out, &consumed, this, hook_.load(std::memory_order_acquire));
    // A socket failure, a timeout or a malformed reply leaves the stream at an unknown position (a late reply
    // may still arrive), so that connection is dropped; a daemon-reported error was read completely and the
    // connection is reused.
    Give(*conn, consumed);
    if (!s.ok()) return Status(s.code(), "remote read of " + std::string(e.path) + " via " + path_ + ": " + s.message());
    if (out->size() != e.stored_size)
      return Status(Code::kCorrupt, "remote read of " + std::string(e.path) + ": got " + std::to_string(out->size()) +
                                        " stored bytes, index says " + std::to_string(e.stored_size));
    return Status::Ok();
  }

  void SetInternalFdHook(void (*hook)(int fd)) override {
    std::lock_guard<std::mutex> g(mu_);
    hook_.store(hook, std::memory_order_release);
    if (hook == nullptr) return;
    for (const OwnedFd& c : all_)
      if (StillOurs(c)) hook(c.fd);
    for (const OwnedFd& m : held_)
      if (StillOurs(m)) hook(m.fd);
  }

  // The forking thread holds mu_ across fork(), so the child never inherits a half-updated pool.
  void AtForkPrepare() override {
    mu_.lock();
    fork_locked_ = true;
  }
  void AtForkParent() override {
    fork_locked_ = false;
    mu_.unlock();
  }
  void AfterForkChild() override {
    if (fork_locked_) {
      fork_locked_ = false;
      mu_.unlock();  // the forking thread's lock (the child's only thread)
    } else {
      // No prepare hook ran: another thread may have held mu_ at fork time and does not exist here.
      new (&mu_) std::mutex;
    }
    std::lock_guard<std::mutex> g(mu_);
    DropInheritedLocked();
  }

 private:
  // In a child: inherited connections carry the parent's conversations and must never be talked on. The
  // child closes its copies of those still naming our sockets (the parent keeps its own; closing here also
  // lets the daemon see EOF once the parent drops one) and of memfds a parent thread held at fork time;
  // numbers that name something else now are forgotten, not closed. New connections are made lazily.
  void DropInheritedLocked() {
    for (const OwnedFd& c : all_) CloseIfOurs(c);
    for (const OwnedFd& m : held_) CloseIfOurs(m);
    all_.clear();
    idle_.clear();
    held_.clear();
    owner_ = getpid();
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
        CloseIfOurs(o);
        return;
      }
    // Not found: dropped by a fork-without-hooks cleanup; nothing of ours to close.
  }

  static void EraseFrom(std::vector<OwnedFd>* v, const OwnedFd& o) {
    for (size_t i = 0; i < v->size(); ++i)
      if ((*v)[i].fd == o.fd && (*v)[i].ino == o.ino && (*v)[i].dev == o.dev) {
        (*v)[i] = v->back();
        v->pop_back();
        return;
      }
  }

  Result<OwnedFd> Take(int64_t deadline) {
    {
      std::lock_guard<std::mutex> g(mu_);
      // Forked without the AtFork hooks: never talk on the parent's connections (replies would be split
      // between two processes); drop our copies and connect afresh.
      if (owner_ != getpid()) DropInheritedLocked();
      while (!idle_.empty()) {
        OwnedFd c = idle_.back();
        idle_.pop_back();
        if (StillOurs(c)) return c;
        // The number was closed behind our back and may now be the program's file or socket: never send on
        // it, never close it; just forget it.
        EraseFrom(&all_, c);
      }
    }
    FdHook hook = hook_.load(std::memory_order_acquire);
    OwnedFd c;
    auto fd = Connect(path_, deadline, hook, &c);
    if (!fd.ok()) return fd.status();
    DaemonInfo info;
    Status s = Handshake(c.fd, deadline, &info, this, hook);
    if (!s.ok()) {
      CloseIfOurs(c);
      return s;
    }
    std::lock_guard<std::mutex> g(mu_);
    all_.push_back(c);
    return c;
  }

  void Give(const OwnedFd& c, bool reusable) {
    std::lock_guard<std::mutex> g(mu_);
    if (reusable) {
      idle_.push_back(c);
      return;
    }
    EraseFrom(&all_, c);
    CloseIfOurs(c);
  }

  const std::string path_;
  const int timeout_ms_;
  std::mutex mu_;
  std::vector<OwnedFd> idle_;  // connected, handshaken, no request in flight
  std::vector<OwnedFd> all_;   // every connection this process owns (idle or in use)
  std::vector<OwnedFd> held_;  // memfds passed by the daemon, held while their payload is copied out
  std::atomic<FdHook> hook_{nullptr};  // marks our fds internal (the interposer's close-all protection)
  bool fork_locked_ = false;           // AtForkPrepare holds mu_
  std::atomic<uint64_t> next_id_{2};   // 1 is the hello
  pid_t owner_ = getpid();             // the process the connections in all_ belong to
};

}  // namespace

Result<DaemonInfo> ProbeDaemon(const std::string& socket_path, int timeout_ms) {
  int64_t deadline = dp::NowMs() + timeout_ms;
  OwnedFd c;
  auto fd = Connect(socket_path, deadline, nullptr, &c);
  if (!fd.ok()) return fd.status();
  DaemonInfo info;
  Status s = Handshake(c.fd, deadline, &info, nullptr, nullptr);
  CloseIfOurs(c);
  if (!s.ok()) return Status(s.code(), "fanstore daemon at " + socket_path + ": " + s.message());
  return info;
}

Status WaitForDaemon(const std::string& socket_path, int timeout_ms) {
  int64_t deadline = dp::NowMs() + timeout_ms;
  for (;;) {
    int64_t left = deadline - dp::NowMs();
    auto r = ProbeDaemon(socket_path, static_cast<int>(left > 1000 ? 1000 : (left > 0 ? left : 1)));
    if (r.ok()) return Status::Ok();
    if (dp::NowMs() >= deadline)
      return Status(Code::kTimeout, "daemon at " + socket_path + " not ready after " + std::to_string(timeout_ms) +
                                        " ms: " + r.status().message());
    timespec ts{0, 100 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
}

Result<std::shared_ptr<RemoteFetcher>> ConnectDaemonFetcher(const std::string& socket_path, DaemonInfo* info) {
  auto r = ProbeDaemon(socket_path, 5000);
  if (!r.ok()) return r.status();
  *info = *r;
  int timeout = info->timeout_ms > 0 ? static_cast<int>(info->timeout_ms) : 5000;
  return std::shared_ptr<RemoteFetcher>(std::make_shared<DaemonFetcher>(socket_path, timeout));
}

}  // namespace fanstore
