// The client half of daemon mode: connect + handshake, readiness wait, and a RemoteFetcher over the socket.
#include "fanstore/daemon_client.hpp"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "daemon_protocol.hpp"

namespace fanstore {

namespace dp = daemon_proto;

namespace {

// Connects a CLOEXEC, non-blocking Unix stream socket to `path` (a full backlog is retried until the deadline).
Result<int> Connect(const std::string& path, int64_t deadline_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return Status(Code::kNameTooLong, "daemon socket path '" + path + "' is longer than " +
                                          std::to_string(sizeof addr.sun_path - 1) + " bytes");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Status::FromErrno(errno, "socket for the daemon connection");
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    int err = errno;
    close(fd);
    if ((err == EAGAIN || err == EINTR) && dp::NowMs() < deadline_ms) {
      timespec ts{0, 2 * 1000 * 1000};
      nanosleep(&ts, nullptr);
      continue;
    }
    return Status(Code::kIoError, "cannot connect to the fanstore daemon at " + path + ": " + std::strerror(err) +
                                      (err == ENOENT ? " (is `fanstore serve` running and ready?)" : ""));
  }
}

// Reads one reply (header, message, payload) for request `req_id`. *consumed says whether the whole reply was
// read (the connection can carry the next request); a daemon-reported error is returned with its message.
Status ReadReply(int fd, uint64_t req_id, int64_t deadline_ms, std::string* payload, bool* consumed) {
  *consumed = false;
  unsigned char hb[dp::kReplyHeaderSize];
  int passed = -1;
  Status s = dp::RecvAll(fd, hb, sizeof hb, deadline_ms, &passed);
  dp::ReplyHeader h;
  if (s.ok() && (!dp::DecodeReplyHeader(hb, &h) || h.req_id != req_id))
    s = Status(Code::kIoError, "daemon sent a malformed or out-of-order reply (version mismatch?)");
  std::string msg;
  if (s.ok() && h.msg_len > 0) {
    msg.resize(h.msg_len);
    s = dp::RecvAll(fd, msg.data(), msg.size(), deadline_ms, nullptr);
  }
  if (s.ok() && (h.flags & dp::kPayloadInMemfd)) {
    if (passed < 0) {
      s = Status(Code::kIoError, "daemon announced a shared-memory payload but passed no fd");
    } else {
      uint64_t len = h.shm_offset + h.payload_size;
      void* m = mmap(nullptr, len, PROT_READ, MAP_SHARED, passed, 0);
      if (m == MAP_FAILED) {
        s = Status::FromErrno(errno, "mmap of the daemon's payload");
      } else {
        payload->assign(static_cast<const char*>(m) + h.shm_offset, h.payload_size);
        munmap(m, len);
      }
    }
  } else if (s.ok()) {
    payload->resize(h.payload_size);
    if (h.payload_size > 0) s = dp::RecvAll(fd, payload->data(), payload->size(), deadline_ms, nullptr);
  }
  if (passed >= 0) close(passed);
  if (!s.ok()) return s;
  *consumed = true;
  if (h.code != Code::kOk) return Status(h.code, "daemon: " + msg);
  return Status::Ok();
}

// Sends a hello on a fresh connection and decodes the daemon's answer.
Status Handshake(int fd, int64_t deadline_ms, DaemonInfo* info) {
  unsigned char rb[dp::kRequestSize];
  dp::EncodeRequest({dp::MsgType::kHello, 1, 0}, rb);
  Status s = dp::SendAll(fd, rb, sizeof rb, deadline_ms);
  std::string payload;
  bool consumed = false;
  if (s.ok()) s = ReadReply(fd, 1, deadline_ms, &payload, &consumed);
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

class DaemonFetcher final : public RemoteFetcher {
 public:
  DaemonFetcher(std::string path, int timeout_ms) : path_(std::move(path)), timeout_ms_(timeout_ms) {}
  ~DaemonFetcher() override {
    for (int fd : all_) close(fd);
  }

  Status FetchStored(const Entry& e, std::string* out) override {
    int64_t deadline = dp::NowMs() + timeout_ms_;
    auto fd = Take(deadline);
    if (!fd.ok()) return Status(fd.status().code(), "remote read of " + std::string(e.path) + ": " + fd.status().message());
    uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    unsigned char rb[dp::kRequestSize];
    dp::EncodeRequest({dp::MsgType::kFetch, id, e.id}, rb);
    Status s = dp::SendAll(*fd, rb, sizeof rb, deadline);
    bool consumed = false;
    if (s.ok()) s = ReadReply(*fd, id, deadline, out, &consumed);
    // A socket failure or timeout leaves the stream at an unknown position (a late reply may still arrive),
    // so that connection is dropped; a daemon-reported error was read completely and the connection is reused.
    Give(*fd, consumed);
    if (!s.ok()) return Status(s.code(), "remote read of " + std::string(e.path) + " via " + path_ + ": " + s.message());
    if (out->size() != e.stored_size)
      return Status(Code::kCorrupt, "remote read of " + std::string(e.path) + ": got " + std::to_string(out->size()) +
                                        " stored bytes, index says " + std::to_string(e.stored_size));
    return Status::Ok();
  }

  void AfterForkChild() override {
    // The parent's threads may have held mu_ at fork time and do not exist here: start from a fresh mutex.
    new (&mu_) std::mutex;
    // Inherited connections carry the parent's conversations; the child closes its copies and reconnects lazily.
    for (int fd : all_) close(fd);
    all_.clear();
    idle_.clear();
    owner_ = getpid();
  }

 private:
  Result<int> Take(int64_t deadline) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (owner_ != getpid()) {
        // Forked without the AtFork hooks: never talk on the parent's connections (replies would be split
        // between two processes); close our copies and connect afresh.
        for (int fd : all_) close(fd);
        all_.clear();
        idle_.clear();
        owner_ = getpid();
      }
      if (!idle_.empty()) {
        int fd = idle_.back();
        idle_.pop_back();
        return fd;
      }
    }
    auto fd = Connect(path_, deadline);
    if (!fd.ok()) return fd;
    DaemonInfo info;
    Status s = Handshake(*fd, deadline, &info);
    if (!s.ok()) {
      close(*fd);
      return s;
    }
    std::lock_guard<std::mutex> g(mu_);
    all_.push_back(*fd);
    return fd;
  }

  void Give(int fd, bool reusable) {
    std::lock_guard<std::mutex> g(mu_);
    if (reusable) {
      idle_.push_back(fd);
      return;
    }
    for (size_t i = 0; i < all_.size(); ++i)
      if (all_[i] == fd) {
        all_[i] = all_.back();
        all_.pop_back();
        break;
      }
    close(fd);
  }

  const std::string path_;
  const int timeout_ms_;
  std::mutex mu_;
  std::vector<int> idle_;  // connected, handshaken, no request in flight
  std::vector<int> all_;   // every connection this process owns (idle or in use)
  std::atomic<uint64_t> next_id_{2};  // 1 is the hello
  pid_t owner_ = getpid();            // the process the connections in all_ belong to
};

}  // namespace

Result<DaemonInfo> ProbeDaemon(const std::string& socket_path, int timeout_ms) {
  int64_t deadline = dp::NowMs() + timeout_ms;
  auto fd = Connect(socket_path, deadline);
  if (!fd.ok()) return fd.status();
  DaemonInfo info;
  Status s = Handshake(*fd, deadline, &info);
  close(*fd);
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
