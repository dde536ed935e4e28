// SocketServer: non-blocking Unix-socket event loop; replies carry big payloads as memfds (SCM_RIGHTS).
#include "socket_server.hpp"

#include <poll.h>
#include <time.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "log.hpp"

namespace fanstore::daemon {
namespace {

namespace dp = daemon_proto;

uint64_t NowUs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

struct OutMsg {
  std::string bytes;  // header + message + inline payload
  size_t off = 0;
  int fd = -1;        // memfd to pass with the first byte; owned
  ~OutMsg() {
    if (fd >= 0) close(fd);
  }
  OutMsg() = default;
  OutMsg(OutMsg&& o) noexcept : bytes(std::move(o.bytes)), off(o.off), fd(std::exchange(o.fd, -1)) {}
  OutMsg& operator=(OutMsg&&) = delete;
};

struct Conn {
  int fd = -1;
  std::string in;
  std::deque<OutMsg> out;
};

// A fetch finished by the transport, handed back to the server thread.
struct Completion {
  uint64_t conn_id = 0, req_id = 0, t0_us = 0;
  Status status;
  Payload payload;
};

sockaddr_un Addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), std::min(path.size() + 1, sizeof a.sun_path));
  return a;
}

}  // namespace

struct SocketServer::Impl {
  std::shared_ptr<const Image> img;
  MpiTransport* transport;
  DaemonStats* stats;
  dp::HelloInfo hello;
  std::string path, tmp_path;
  int listen_fd = -1, wake_fd = -1;
  bool published = false;

  std::mutex mu;                       // guards `done` (fetches may complete on another thread at shutdown)
  std::vector<Completion> done;

  std::map<uint64_t, Conn> conns;      // the polling thread only
  std::set<uint32_t> reported_bad_parts;
  std::vector<pollfd> pfds;
  std::vector<uint64_t> ids;
  uint64_t next_conn = 1;

  void Wake() {
    uint64_t one = 1;
    ssize_t r = write(wake_fd, &one, sizeof one);
    (void)r;  // a full eventfd counter still wakes the loop
  }

  void Queue(Conn& c, dp::MsgType type, uint64_t req_id, const Status& s, Payload p) {
    dp::ReplyHeader h;
    h.type = type;
    h.req_id = req_id;
    h.code = s.code();
    std::string msg = s.ok() ? std::string() : s.message();
    if (msg.size() > dp::kMaxReplyMessage) msg.resize(dp::kMaxReplyMessage);  // clients reject longer ones
    h.msg_len = static_cast<uint32_t>(msg.size());
    h.payload_size = p.length();
    OutMsg m;
    if (p.memfd >= 0) {
      h.flags = dp::kPayloadInMemfd;
      h.shm_offset = p.offset;
      m.fd = std::exchange(p.memfd, -1);
    }
    m.bytes.resize(dp::kReplyHeaderSize);
    dp::EncodeReplyHeader(h, reinterpret_cast<unsigned char*>(m.bytes.data()));
    m.bytes += msg;
    if (m.fd < 0) m.bytes += p.bytes;
    c.out.push_back(std::move(m));
  }

  // Reads a file of a partition staged here (the client normally does this itself; this covers a client
  // whose view is older than ours). Big payloads go into a memfd.
  Status ReadLocal(uint32_t id, Payload* p) {
    std::string stored;
    Status s = img->ReadStored(id, &stored);
    if (!s.ok()) return s;
    if (stored.size() <= dp::kInlineMax) {
      p->bytes = std::move(stored);
      return Status::Ok();
    }
    void* map = nullptr;
    s = dp::CreatePayloadMemfd(stored.size(), &p->memfd, &map);
    if (!s.ok()) return s;
    std::memcpy(map, stored.data(), stored.size());
    munmap(map, stored.size());
    p->size = stored.size();
    return Status::Ok();
  }

  void HandleRequest(uint64_t conn_id, Conn& c, const dp::Request& r) {
    if (r.type == dp::MsgType::kHello) {
      Payload p;
      p.bytes = dp::EncodeHello(hello);
      Queue(c, r.type, r.req_id, Status::Ok(), std::move(p));
      return;
    }
    uint64_t t0 = NowUs();
    stats->client_requests.fetch_add(1, std::memory_order_relaxed);
    if (r.entry >= img->size() || !img->Get(r.entry).is_reg()) {
      stats->client_errors.fetch_add(1, std::memory_order_relaxed);
      Queue(c, r.type, r.req_id, Status(Code::kInvalidArgument, "entry " + std::to_string(r.entry) + " is not a file"),
            Payload{});
      return;
    }
    Entry e = img->Get(r.entry);
    if (img->HasPartition(e.part) && !reported_bad_parts.count(e.part)) {
      Payload p;
      Status s = ReadLocal(r.entry, &p);
      if (s.ok()) {
        Queue(c, r.type, r.req_id, s, std::move(p));
        stats->AddLatency(NowUs() - t0);
        return;
      }
      // Our copy is unreadable (deleted, truncated): the other replicas may still have it. Said once per
      // partition, not once per file.
      if (reported_bad_parts.insert(e.part).second)
        Error("local read of %s failed (%s); partition %u is served by the other replicas from now on",
              std::string(e.path).c_str(), s.ToString().c_str(), e.part);
    }
    uint64_t req_id = r.req_id;
    transport->Fetch(r.entry, [this, conn_id, req_id, t0](Status s, Payload p) {
      Completion cp;
      cp.conn_id = conn_id;
      cp.req_id = req_id;
      cp.t0_us = t0;
      cp.status = std::move(s);
      cp.payload = std::move(p);
      std::lock_guard<std::mutex> g(mu);
      done.push_back(std::move(cp));
    });
  }

  // false: the connection is gone and was closed.
  bool OnReadable(uint64_t id, Conn& c) {
    char buf[4096];
    for (;;) {
      ssize_t n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;  // EOF or error: the client went away
    }
    size_t used = 0;
    while (c.in.size() - used >= dp::kRequestSize) {
      dp::Request r;
      if (!dp::DecodeRequest(reinterpret_cast<const unsigned char*>(c.in.data() + used), &r)) {
        Error("client sent a malformed request (fanstore version mismatch?); closing its connection");
        return false;
      }
      used += dp::kRequestSize;
      HandleRequest(id, c, r);
    }
    c.in.erase(0, used);
    return true;
  }

  // Writes what it can; false when the peer is gone.
  bool Flush(Conn& c) {
    while (!c.out.empty()) {
      OutMsg& m = c.out.front();
      ssize_t n;
      if (m.fd >= 0 && m.off == 0) {
        iovec iov{m.bytes.data(), m.bytes.size()};
        alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
        msghdr h{};
        h.msg_iov = &iov;
        h.msg_iovlen = 1;
        h.msg_control = cbuf;
        h.msg_controllen = sizeof cbuf;
        cmsghdr* cm = CMSG_FIRSTHDR(&h);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(cm), &m.fd, sizeof(int));
        n = sendmsg(c.fd, &h, MSG_NOSIGNAL | MSG_DONTWAIT);
      } else {
        n = send(c.fd, m.bytes.data() + m.off, m.bytes.size() - m.off, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        return false;
      }
      m.off += static_cast<size_t>(n);
      if (m.off == m.bytes.size()) c.out.pop_front();  // closes our copy of the memfd
    }
    return true;
  }

  bool DeliverCompletions() {
    std::vector<Completion> ds;
    {
      std::lock_guard<std::mutex> g(mu);
      ds.swap(done);
    }
    if (ds.empty()) return false;
    for (Completion& cp : ds) {
      if (!cp.status.ok()) stats->client_errors.fetch_add(1, std::memory_order_relaxed);
      stats->AddLatency(NowUs() - cp.t0_us);
      auto it = conns.find(cp.conn_id);
      if (it == conns.end()) continue;  // the client left; Payload's destructor closes the memfd
      Queue(it->second, dp::MsgType::kFetch, cp.req_id, cp.status, std::move(cp.payload));
    }
    return true;
  }

  void Accept() {
    for (;;) {
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) Error("accept: %s", std::strerror(errno));
        return;
      }
      conns[next_conn++].fd = fd;
    }
  }

  bool Poll(int64_t timeout_us) {
    bool did = DeliverCompletions();
    pfds.clear();
    ids.clear();
    pfds.push_back({wake_fd, POLLIN, 0});
    pfds.push_back({listen_fd, POLLIN, 0});
    for (auto& [id, c] : conns) {
      pfds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      ids.push_back(id);
    }
    int64_t us = did ? 0 : timeout_us;
    timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
    int r = ppoll(pfds.data(), pfds.size(), &ts, nullptr);
    if (r < 0) {
      if (errno != EINTR) Error("poll: %s", std::strerror(errno));
      return did;
    }
    if (r == 0) return did;
    if (pfds[0].revents) {
      uint64_t v;
      ssize_t n = read(wake_fd, &v, sizeof v);
      (void)n;
    }
    if (pfds[1].revents & POLLIN) Accept();
    for (size_t i = 2; i < pfds.size(); ++i) {
      if (!pfds[i].revents) continue;
      auto it = conns.find(ids[i - 2]);
      if (it == conns.end()) continue;
      bool alive = true;
      if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) alive = OnReadable(it->first, it->second);
      if (alive) alive = Flush(it->second);
      if (!alive) {
        close(it->second.fd);
        conns.erase(it);
      }
    }
    return true;
  }
};

SocketServer::SocketServer(std::shared_ptr<const Image> image, MpiTransport* transport, DaemonStats* stats,
                           dp::HelloInfo hello)
    : impl_(std::make_unique<Impl>()) {
  impl_->img = std::move(image);
  impl_->transport = transport;
  impl_->stats = stats;
  impl_->hello = std::move(hello);
}

SocketServer::~SocketServer() {
  Stop();
  if (impl_->wake_fd >= 0) close(impl_->wake_fd);
}

Status SocketServer::Bind(const std::string& path) {
  Impl& m = *impl_;
  m.path = path;
  m.tmp_path = path + ".starting." + std::to_string(getpid());
  sockaddr_un probe{};
  if (m.tmp_path.size() >= sizeof probe.sun_path)
    return Status(Code::kNameTooLong, "socket path " + m.tmp_path + " is longer than " +
                                          std::to_string(sizeof probe.sun_path - 1) + " bytes: use --socket");
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status(Code::kExists, path + " exists and is not a socket");
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a = Addr(path);
    bool live = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0) close(fd);
    if (live) return Status(Code::kExists, "a daemon is already serving at " + path + " (give another --socket)");
    unlink(path.c_str());  // stale: left by a daemon that was killed
  }
  m.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.wake_fd < 0) return Status::FromErrno(errno, "eventfd");
  m.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (m.listen_fd < 0) return Status::FromErrno(errno, "socket");
  unlink(m.tmp_path.c_str());
  sockaddr_un a = Addr(m.tmp_path);
  if (bind(m.listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return Status::FromErrno(errno, "bind " + m.tmp_path);
  if (listen(m.listen_fd, 1024) != 0) return Status::FromErrno(errno, "listen " + m.tmp_path);
  return Status::Ok();
}

Status SocketServer::Publish() {
  if (rename(impl_->tmp_path.c_str(), impl_->path.c_str()) != 0)
    return Status::FromErrno(errno, "rename " + impl_->tmp_path + " -> " + impl_->path);
  impl_->published = true;
  return Status::Ok();
}

bool SocketServer::Poll(int64_t timeout_us) { return impl_->Poll(timeout_us); }

void SocketServer::Wake() {
  if (impl_->wake_fd >= 0) impl_->Wake();
}

void SocketServer::Stop() {
  Impl& m = *impl_;
  for (auto& [id, c] : m.conns) close(c.fd);
  m.conns.clear();
  if (m.listen_fd >= 0) {
    close(m.listen_fd);
    m.listen_fd = -1;
    unlink((m.published ? m.path : m.tmp_path).c_str());
  }
}

}  // namespace fanstore::daemon
