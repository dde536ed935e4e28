// SocketServer: an epoll loop over the client connections, one request at a time per connection, replies in
// shared reply areas (memfds passed once with SCM_RIGHTS), peer credentials checked on accept.
#include "socket_server.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "fanstore/protocol/image_format.hpp"
#include "fanstore/protocol/payload_memfd.hpp"
#include "fanstore/protocol/range_check.hpp"
#include "fanstore/protocol/socket_address.hpp"
#include "log.hpp"

namespace fanstore::daemon {
namespace {

namespace dp = daemon_proto;

// Keys of the epoll events that are not connections.
constexpr uint64_t kWakeKey = 0, kListenKey = 1, kWatchKey = 2;
// A prefetch path longer than this is a protocol error (PATH_MAX is 4096).
constexpr size_t kMaxPathLine = 64 * 1024;

struct OutMsg {
  std::string bytes;  // header + message + inline payload
  size_t off = 0;
  std::shared_ptr<ReplyArea> pass;  // its fd rides on the first byte
};

struct Conn {
  int fd = -1;
  uid_t uid = 0;
  bool refused = false;  // SO_PEERCRED said no: the first request is answered with the reason, then closed
  bool closing = false;  // close once the output is flushed
  bool busy = false;     // a fetch is being answered: its next request waits in the socket
  uint32_t events = 0;   // current epoll interest
  std::string in;
  std::deque<OutMsg> out;
  std::shared_ptr<ReplyArea> area;    // current reply area
  bool area_known = false;            // the client has it (its fd went out)
  std::shared_ptr<ReplyArea> oneoff;  // the one-off memfd of the request being answered
  uint64_t busy_req = 0;
  uint64_t busy_len = 0;  // the length the fetch being answered asked for: a successful reply has exactly this
  struct Hint {           // a prefetch hint being received
    uint64_t left = 0, req = 0, stream = 0;
    bool append = false, bad = false;
    std::vector<ByteRange> ranges;
    dp::PrefetchCounts counts;
  };
  std::optional<Hint> hint;
};

// Supplementary groups of a process, from /proc (SO_PEERCRED carries only the primary gid).
bool InGroup(pid_t pid, gid_t gid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Groups:", 0) != 0) continue;
    std::istringstream in(line.substr(7));
    unsigned long g;
    while (in >> g)
      if (static_cast<gid_t>(g) == gid) return true;
  }
  return false;
}

// 0 when a daemon listens at `path`, else connect(2)'s errno (ECONNREFUSED: a socket nobody listens on).
int ConnectError(const std::string& path) {
  const SocketAddress a(path);  // (PATH.starting.PID may be longer than sun_path)
  if (a.dir_errno() != 0) return a.dir_errno();
  if (!a.fits()) return ENAMETOOLONG;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int err = connect(fd, a.get(), a.size()) == 0 ? 0 : errno;
  close(fd);
  return err;
}

// Makes `path` free for our socket: nothing there, or a stale socket left by a killed daemon (no listener: it is
// removed). A live daemon's socket, one we may not connect to (another user's), or a non-socket is an error.
Status ClearStale(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Status::Ok();
  if (!S_ISSOCK(st.st_mode)) return Status(Code::kExists, path + " exists and is not a socket");
  const int err = ConnectError(path);
  if (err == 0)
    return Status(Code::kExists, "a daemon is already serving at " + path +
                                     " (two ranks of one node with the same --socket? give each its own, e.g. "
                                     "--socket /tmp/fanstore-{rank}.sock)");
  if (err != ECONNREFUSED && err != ENOENT)
    return Status(Code::kExists,
                  path + " is a socket this daemon cannot check (" + std::strerror(err) + "): give another --socket");
  unlink(path.c_str());  // stale: left by a daemon that was killed
  return Status::Ok();
}

// The directory holding `path` ("." for a bare name, "/" at the root), and the name in it.
std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}
std::string NameOf(const std::string& path) { return path.substr(path.rfind('/') + 1); }  // npos + 1 == 0

// Whether process `pid` has ended: no such process, or a zombie its parent has not reaped yet.
bool ProcessEnded(long pid) {
  if (pid <= 0 || pid > INT32_MAX) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');  // the name may hold spaces and parentheses; the state follows it
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// The short temporary name Bind uses where PATH.starting.PID is too long for a socket address: it names the host,
// since the directory may be shared by nodes whose PIDs mean nothing here (and whose listeners refuse us).
std::string ShortStartingPrefix() {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(".fanstore-starting.") + host + ".";
}

// Removes the temporary sockets (PATH.starting.PID, or this host's .fanstore-starting.HOST.PID: Bind's) of daemons
// killed before they renamed them: those whose process has ended and that nobody listens on.
void RemoveStaleStarting(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  int removed = 0;
  const std::string starts[] = {NameOf(path) + ".starting.", ShortStartingPrefix()};
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    size_t digits = 0;
    for (const std::string& start : starts)
      if (name.size() > start.size() && name.compare(0, start.size(), start) == 0) digits = start.size();
    if (digits == 0 || name.find_first_not_of("0123456789", digits) != std::string::npos) continue;
    errno = 0;
    const long pid = std::strtol(name.c_str() + digits, nullptr, 10);
    struct stat st;
    const std::string full = (dir == "/" ? "" : dir) + "/" + name;
    if (errno == 0 && ProcessEnded(pid) && lstat(full.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
        ConnectError(full) == ECONNREFUSED && unlink(full.c_str()) == 0)
      ++removed;
  }
  closedir(d);
  if (removed > 0) Info("removed %d socket(s) that killed daemons left in %s while starting", removed, dir.c_str());
}

// Binds `fd` to `path`. A path too long for sun_path (a long directory) is bound through /proc/self/fd/N/NAME, N an
// O_PATH descriptor of its directory: the kernel resolves that alias to the same directory, so the socket file
// gets the very name `path` (rename, chmod and unlink use the full path, which has no such limit).
Status BindAt(int fd, const std::string& path) {
  const SocketAddress a(path);
  if (a.dir_errno() != 0)
    return Status::FromErrno(a.dir_errno(), "open the socket's directory " + Printable(DirectoryOf(path)));
  if (!a.fits())
    return Status(Code::kNameTooLong,
                  "socket name " + Printable(path) + " is too long to bind, even through its directory");
  if (bind(fd, a.get(), a.size()) != 0) return Status::FromErrno(errno, "bind " + Printable(path));
  return Status::Ok();
}

// The n bytes at data lie inside the area (n may be anything a caller computed: the test cannot wrap).
bool Holds(const ReplyArea& a, const char* data, uint64_t n) {
  auto at = reinterpret_cast<uintptr_t>(data), base = reinterpret_cast<uintptr_t>(a.base);
  return at >= base && RangeWithin(at - base, n, a.size);
}

}  // namespace

ReplyArea::~ReplyArea() {
  if (base) munmap(base, size);
  if (fd >= 0) close(fd);
}

struct SocketServer::Impl {
  ServerOptions o;
  DaemonStats* stats;
  RequestHandler* handler = nullptr;
  std::string path, tmp_path;
  int listen_fd = -1, wake_fd = -1, ep = -1;
  bool published = false;
  std::mutex unlink_mu;  // Unpublish may run on the signal-handling thread
  bool unlinked = false;
  int64_t accept_paused_until = 0;  // out of fds: the listening socket rests a while (else epoll spins)

  std::unordered_map<uint64_t, Conn> conns;
  uint64_t next_conn = 3;
  std::function<void()> on_watch;  // the watched fd (Watch) is readable
  uint64_t handling = 0;           // the connection whose requests Handle is working through
  std::vector<uint64_t> ready;     // connections with a whole request buffered, to handle on the next Poll

  int Ctl(int op, int fd, uint32_t events, uint64_t key) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = key;
    return epoll_ctl(ep, op, fd, &ev);
  }

  // The epoll set and its wake-up eventfd (once).
  Status OpenLoop() {
    if (ep >= 0) return Status::Ok();
    if (wake_fd < 0) wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) return Status::FromErrno(errno, "eventfd");
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return Status::FromErrno(errno, "epoll_create1");
    Ctl(EPOLL_CTL_ADD, wake_fd, EPOLLIN, kWakeKey);
    return Status::Ok();
  }

  // A connection reads its next request only when its previous answer is out: replies the client does not read
  // stay in its socket, and it can never make us queue more than one (bounded memory and fds per connection).
  static bool Accepting(const Conn& c) { return !c.busy && !c.closing && c.out.empty(); }

  void SetEvents(uint64_t id, Conn& c) {
    uint32_t want = 0;
    if (Accepting(c)) want |= EPOLLIN;
    if (!c.out.empty()) want |= EPOLLOUT;
    if (want == c.events) return;
    Ctl(EPOLL_CTL_MOD, c.fd, want, id);
    c.events = want;
  }

  void Queue(Conn& c, dp::MsgType type, uint64_t req_id, const Status& s, const std::string& inline_payload = {},
             uint32_t flags = 0, uint64_t size = 0, uint64_t offset = 0, std::shared_ptr<ReplyArea> pass = nullptr) {
    dp::ReplyHeader h;
    h.type = type;
    h.req_id = req_id;
    h.code = s.code();
    std::string msg = s.ok() ? std::string() : s.message();
    if (msg.size() > dp::kMaxReplyMessage) msg.resize(dp::kMaxReplyMessage);  // clients reject longer ones
    h.msg_len = static_cast<uint32_t>(msg.size());
    h.flags = flags;
    h.payload_size = flags & (dp::kPayloadInArea | dp::kPayloadInMemfd) ? size : inline_payload.size();
    h.shm_offset = offset;
    OutMsg& m = c.out.emplace_back();
    m.bytes.resize(dp::kReplyHeaderSize);
    dp::EncodeReplyHeader(h, reinterpret_cast<unsigned char*>(m.bytes.data()));
    m.bytes += msg;
    m.bytes += inline_payload;
    m.pass = std::move(pass);
  }

  void Deliver(uint64_t id, uint64_t req_id, Status s, const char* data, uint64_t n) {
    auto it = conns.find(id);
    if (it == conns.end() || !it->second.busy || it->second.busy_req != req_id) return;
    Conn& c = it->second;
    // A reply is never longer or shorter than what was asked for, whatever the path that produced it computed.
    if (s.ok() && n != c.busy_len)
      s = Status(Code::kIoError, "daemon error: a reply of " + std::to_string(n) + " bytes to a fetch of " +
                                     std::to_string(c.busy_len) + " (not sent)");
    if (!s.ok()) stats->client_errors.fetch_add(1, std::memory_order_relaxed);
    c.busy = false;
    std::shared_ptr<ReplyArea> a = std::move(c.oneoff);  // where the fetch landed, if it needed a one-off memfd
    if (s.ok() && !(a && Holds(*a, data, n))) {
      // Into the connection's area (in place when it landed there), or a one-off memfd for a huge payload.
      a = c.area && !c.area->poisoned && Holds(*c.area, data, n) ? c.area : nullptr;
      if (!a && (a = AreaFor(c, n))) {
        if (n) std::memcpy(a->base, data, n);
        data = a->base;
      }
      c.oneoff.reset();  // one AreaFor made goes with this reply: an idle connection pins one area only
    }
    if (!s.ok() || !a) {
      Queue(c, dp::MsgType::kFetch, req_id, s.ok() ? Status(Code::kNoMemory, "daemon has no memory for the reply") : s);
    } else {
      const bool pass = a->oneoff || !c.area_known;  // a one-off memfd's or a new area's fd goes with the reply
      if (!a->oneoff) c.area_known = true;
      const uint32_t flags = a->oneoff ? dp::kPayloadInMemfd : dp::kPayloadInArea | (pass ? dp::kNewArea : 0);
      Queue(c, dp::MsgType::kFetch, req_id, s, {}, flags, n, static_cast<uint64_t>(data - a->base), pass ? a : nullptr);
    }
    Flush(c);
    SetEvents(id, c);
    // A request already buffered waits for the next Poll: the caller may still read the bytes just delivered from
    // this connection's area (e.g. to cache them). Handle, if it is what called, goes on by itself.
    if (handling != id && !c.in.empty() && Accepting(c)) ready.push_back(id);
  }

  // The connection's area if it can take n bytes, else a new (bigger) one, or a one-off memfd past area_max.
  std::shared_ptr<ReplyArea> AreaFor(Conn& c, uint64_t n) {
    const bool usable = c.area && !c.area->poisoned;
    if (usable && c.area->size >= n) return c.area;
    const bool oneoff = n > o.area_max;
    uint64_t want = std::max<uint64_t>(1u << 20, usable ? c.area->size * 2 : 0);
    while (want < n) want *= 2;
    want = oneoff ? n : std::min(want, o.area_max);
    auto a = std::make_shared<ReplyArea>();
    void* map = nullptr;
    if (Status why = dp::CreatePayloadMemfd(want, &a->fd, &map); !why.ok()) {
      Error("reply %s of %llu bytes: %s", oneoff ? "memfd" : "area", static_cast<unsigned long long>(want),
            why.ToString().c_str());
      return nullptr;
    }
    a->base = static_cast<char*>(map);
    a->size = want;
    a->oneoff = oneoff;
    if (oneoff) {
      c.oneoff = a;
      stats->memfd_replies.fetch_add(1, std::memory_order_relaxed);
    } else {
      c.area = a;
      c.area_known = false;
    }
    return a;
  }

  // Consumes hint body bytes from c.in (complete lines only, unless the body ends); true when the hint is whole.
  bool TakeHintBody(Conn& c, size_t* used) {
    Conn::Hint& h = *c.hint;
    size_t avail = std::min<uint64_t>(c.in.size() - *used, h.left);
    std::string_view chunk(c.in.data() + *used, avail);
    bool last = avail == h.left;
    size_t take = last ? avail : (chunk.rfind('\n') == std::string_view::npos ? 0 : chunk.rfind('\n') + 1);
    if (!last && take == 0 && avail > kMaxPathLine) h.bad = true;
    if (!last && take == 0 && !h.bad) return false;  // wait for the rest of the line
    if (h.bad) take = avail;                         // drain, answer with an error at the end
    if (!h.bad) {
      for (std::string_view p : dp::SplitPaths(chunk.substr(0, take))) {
        ByteRange br;
        switch (handler->Resolve(p, &br)) {
          case RequestHandler::PathKind::kRemote:
            if (h.ranges.size() >= o.max_hint_paths) {
              h.bad = true;
              break;
            }
            h.ranges.push_back(br);
            ++h.counts.remote;
            h.counts.remote_bytes += br.length;
            break;
          case RequestHandler::PathKind::kLocal: ++h.counts.local; break;
          case RequestHandler::PathKind::kMissing: ++h.counts.missing; break;
        }
      }
    }
    *used += take;
    h.left -= take;
    return h.left == 0;
  }

  void FinishHint(Conn& c) {
    Conn::Hint& h = *c.hint;
    if (h.bad) {
      Queue(c, dp::MsgType::kPrefetch, h.req,
            Status(Code::kInvalidArgument, "prefetch hint too big (at most " + std::to_string(dp::kMaxPrefetchBody) +
                                               " bytes, " + std::to_string(o.max_hint_paths) +
                                               " files, lines under 64 KiB)"));
    } else {
      Status s = handler->OnHint(h.stream, std::move(h.ranges), h.append);
      Queue(c, dp::MsgType::kPrefetch, h.req, s, s.ok() ? dp::EncodePrefetchCounts(h.counts) : std::string());
    }
    c.hint.reset();
  }

  // Handles what c.in holds, up to a fetch (answered later) or an incomplete request; false: protocol error, close.
  bool Handle(uint64_t id, Conn& c) {
    size_t used = 0;
    while (!c.busy && !c.closing) {
      // The previous reply is still queued (the client is not reading): the next request waits.
      if (!c.out.empty() && (!Flush(c) || !c.out.empty())) break;
      if (c.hint) {
        if (!TakeHintBody(c, &used)) break;
        FinishHint(c);
        continue;
      }
      if (c.in.size() - used < dp::kRequestSize) break;
      dp::Request r;
      if (!dp::DecodeRequest(reinterpret_cast<const unsigned char*>(c.in.data() + used), &r)) {
        Error("client sent a malformed request (fanstore version mismatch?); closing its connection");
        return false;  // the caller closes the connection, dropping what it buffered
      }
      used += dp::kRequestSize;
      if (c.refused) {
        Queue(c, r.type, r.req_id,
              Status(Code::kPermission, "uid " + std::to_string(c.uid) + " may not use this daemon (it serves uid " +
                                            std::to_string(geteuid()) +
                                            "; `fanstore serve --socket-mode/--group` widen it)"));
        c.closing = true;
      } else if (r.type == dp::MsgType::kHello) {
        // kHelloUnstaged and its list only to a client that reads them (its request says so).
        dp::HelloInfo h = o.hello;
        if (r.part != dp::kHelloAsksUnstaged) {
          h.flags &= ~dp::kHelloUnstaged;
          h.unstaged.clear();
        }
        Queue(c, r.type, r.req_id, Status::Ok(), dp::EncodeHello(h));
      } else if (r.type == dp::MsgType::kCacheMap && o.cache_fd < 0) {
        Queue(c, r.type, r.req_id, Status(Code::kUnsupported, "this daemon keeps no fetch cache (--cache-bytes 0)"));
      } else if (r.type == dp::MsgType::kCacheMap) {
        // A dup rides on the reply (Flush closes it once sent).
        auto pass = std::make_shared<ReplyArea>();
        pass->fd = fcntl(o.cache_fd, F_DUPFD_CLOEXEC, 0);
        if (pass->fd < 0) Queue(c, r.type, r.req_id, Status::FromErrno(errno, "dup of the cache memfd"));
        else Queue(c, r.type, r.req_id, Status::Ok(), {}, dp::kCacheMemfd, 0, 0, pass);
      } else if (r.type == dp::MsgType::kPrefetch) {
        c.hint = Conn::Hint{
            r.body_len, r.req_id, r.stream, (r.flags & dp::kAppend) != 0, r.body_len > dp::kMaxPrefetchBody, {}, {}};
      } else {
        stats->client_requests.fetch_add(1, std::memory_order_relaxed);
        if (r.part >= o.partitions || r.length > dp::kMaxFetchLength ||
            !RangeWithin(r.offset, r.length, format::kMaxStoredOffset)) {
          stats->client_errors.fetch_add(1, std::memory_order_relaxed);
          Queue(c, r.type, r.req_id,
                Status(Code::kInvalidArgument, "no partition " + std::to_string(r.part) + " or bytes " +
                                                   std::to_string(r.offset) + "+" + std::to_string(r.length) +
                                                   " outside any partition"));
          continue;
        }
        c.busy = true;
        c.busy_req = r.req_id;
        c.busy_len = r.length;
        c.in.erase(0, used);
        used = 0;
        // OnFetch may answer at once (cache, local partition): Deliver then leaves the next request to this loop.
        handling = id;
        if (r.flags & dp::kFromSource) handler->OnFetchFromSource(id, r.req_id, ByteRange{r.part, r.offset, r.length});
        else handler->OnFetch(id, r.req_id, ByteRange{r.part, r.offset, r.length});
        handling = 0;
      }
    }
    c.in.erase(0, used);
    return true;
  }

  bool HandleReady() {
    if (ready.empty()) return false;
    std::vector<uint64_t> r;
    r.swap(ready);
    for (uint64_t id : r) {
      auto it = conns.find(id);
      if (it == conns.end() || it->second.busy) continue;
      if (!Handle(id, it->second)) Close(id);
      else SetEvents(id, it->second);
    }
    return true;
  }

  // false: the connection is gone (EOF, error, protocol error).
  bool OnReadable(uint64_t id, Conn& c) {
    char buf[64 * 1024];
    // Only as much as one request needs at a time: a client cannot make us buffer its pipeline.
    for (int rounds = 0; rounds < 16 && Accepting(c); ++rounds) {
      ssize_t n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        if (!Handle(id, c)) return false;
        if (!c.busy && c.in.size() > kMaxPathLine + dp::kRequestSize) {
          // Only a stalled hint line can pile up this much: Handle consumes every whole request.
          Error("client sent more than %zu bytes without a complete request; closing its connection", c.in.size());
          return false;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;  // EOF or error: the client went away
    }
    return true;
  }

  // Writes what it can; false when the peer is gone, or when a closing connection's output is all out.
  bool Flush(Conn& c) {
    while (!c.out.empty()) {
      OutMsg& m = c.out.front();
      iovec iov{m.bytes.data() + m.off, m.bytes.size() - m.off};
      msghdr h{};
      h.msg_iov = &iov;
      h.msg_iovlen = 1;
      alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
      if (m.pass) {  // only before the first byte is out (m.off == 0)
        h.msg_control = cbuf;
        h.msg_controllen = sizeof cbuf;
        cmsghdr* cm = CMSG_FIRSTHDR(&h);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(cm), &m.pass->fd, sizeof(int));
      }
      const ssize_t n = sendmsg(c.fd, &h, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      if (m.pass) {
        // The client has its own reference now: the fd is ours no longer (an area stays mapped here).
        close(m.pass->fd);
        m.pass->fd = -1;
        m.pass.reset();
      }
      m.off += static_cast<size_t>(n);
      if (m.off == m.bytes.size()) c.out.pop_front();
    }
    return !c.closing;
  }

  void Close(uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    epoll_ctl(ep, EPOLL_CTL_DEL, it->second.fd, nullptr);
    close(it->second.fd);
    conns.erase(it);
  }

  bool Allowed(const ucred& cr) const {
    if (cr.uid == geteuid() || cr.uid == 0) return true;
    if (o.socket_mode & 0006) return true;  // the socket is open to everyone by choice
    return o.group != static_cast<gid_t>(-1) && (o.socket_mode & 0060) &&
           (cr.gid == o.group || InGroup(cr.pid, o.group));
  }

  void Accept() {
    for (;;) {
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of fds: stop listening for a while, or a readable listening socket would spin this loop.
          Error("accept: %s; new connections wait (raise `ulimit -n`)", std::strerror(errno));
          accept_paused_until = dp::NowUs() + 100000;
          epoll_ctl(ep, EPOLL_CTL_DEL, listen_fd, nullptr);
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
          Error("accept: %s", std::strerror(errno));
        }
        return;
      }
      AddConnection(fd);
    }
  }

  // A connected client socket (nonblocking) becomes a connection; its credentials decide whether it is served.
  bool AddConnection(int fd) {
    ucred cr{};
    socklen_t len = sizeof cr;
    Conn c;
    c.fd = fd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || !Allowed(cr)) {
      c.refused = true;
      stats->refused.fetch_add(1, std::memory_order_relaxed);
      Error("refused a connection from uid %u (pid %d): not this daemon's user%s", static_cast<unsigned>(cr.uid),
            static_cast<int>(cr.pid), o.group != static_cast<gid_t>(-1) ? " nor in its --group" : "");
    }
    c.uid = cr.uid;
    uint64_t id = next_conn++;
    c.events = EPOLLIN;
    if (Ctl(EPOLL_CTL_ADD, fd, EPOLLIN, id) != 0) {
      const int err = errno;  // for Adopt's message: close may change it
      close(fd);
      errno = err;
      return false;
    }
    conns.emplace(id, std::move(c));
    return true;
  }

  bool Poll(int64_t timeout_us) {
    bool handled = HandleReady();
    if (handled) timeout_us = 0;
    if (accept_paused_until && dp::NowUs() >= accept_paused_until) {
      accept_paused_until = 0;
      Ctl(EPOLL_CTL_ADD, listen_fd, EPOLLIN, kListenKey);
    }
    if (timeout_us > 0) {
      // epoll_wait counts in milliseconds; the idle ladder needs microseconds: sleep in ppoll on the epoll fd.
      pollfd p{ep, POLLIN, 0};
      timespec ts{static_cast<time_t>(timeout_us / 1000000), static_cast<long>(timeout_us % 1000000) * 1000};
      int r = ppoll(&p, 1, &ts, nullptr);
      if (r <= 0) return handled;
    }
    epoll_event evs[64];
    int n = epoll_wait(ep, evs, 64, 0);
    if (n <= 0) return handled;
    for (int i = 0; i < n; ++i) {
      const uint64_t key = evs[i].data.u64;
      if (key == kWakeKey) {
        uint64_t v;
        ssize_t r = read(wake_fd, &v, sizeof v);
        (void)r;
      } else if (key == kListenKey) {
        Accept();
      } else if (key == kWatchKey) {
        on_watch();
      } else if (auto it = conns.find(key); it != conns.end()) {
        Conn& c = it->second;
        // A hung-up client wants no answer; keeping it would make epoll report the hang-up forever.
        bool alive = !(evs[i].events & (EPOLLHUP | EPOLLERR));
        if (alive && (evs[i].events & EPOLLIN)) alive = OnReadable(key, c);
        if (alive) alive = Flush(c);
        if (!alive) {
          Close(key);
        } else {
          // Its queue drained: requests it sent meanwhile may be buffered here already.
          if (Accepting(c) && c.in.size() >= dp::kRequestSize) ready.push_back(key);
          SetEvents(key, c);
        }
      }
    }
    return true;
  }
};

void SocketServer::SetStaged(bool failed) {
  impl_->o.hello.flags = (impl_->o.hello.flags & ~(dp::kHelloStaged | dp::kHelloUnstaged | dp::kHelloStagingFailed)) |
                         (failed ? dp::kHelloStagingFailed : dp::kHelloStaged);
  impl_->o.hello.unstaged.clear();
}

void SocketServer::SetUnstaged(const std::vector<int>& ranks) {
  impl_->o.hello.flags = (impl_->o.hello.flags & ~(dp::kHelloStaged | dp::kHelloStagingFailed)) | dp::kHelloUnstaged;
  impl_->o.hello.unstaged.assign(ranks.begin(), ranks.end());
}

SocketServer::SocketServer(ServerOptions o, DaemonStats* stats) : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(o);
  impl_->stats = stats;
}

void SocketServer::SetHandler(RequestHandler* h) { impl_->handler = h; }

SocketServer::~SocketServer() {
  Stop();
  if (impl_->wake_fd >= 0) close(impl_->wake_fd);
  if (impl_->ep >= 0) close(impl_->ep);
}

Status SocketServer::CheckPath(const std::string& path) {
  constexpr size_t kMaxPath = sizeof(sockaddr_un::sun_path) - 1;
  if (path.size() > kMaxPath)
    return Status(Code::kNameTooLong, "socket path " + Printable(path) + " is " + std::to_string(path.size()) +
                                          " bytes; a Unix socket path holds at most " + std::to_string(kMaxPath) +
                                          ": give a shorter --socket");
  // Before staging writes anything: bind would fail only then, naming the temporary name it binds first.
  const std::string dir = DirectoryOf(path);
  struct stat st;
  int err = stat(dir.c_str(), &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  if (err == 0 && access(dir.c_str(), W_OK | X_OK) != 0) err = errno;  // bind needs to create the socket there
  if (err == 0) return Status::Ok();
  return Status(Status::FromErrno(err, "").code(), "the directory of socket " + Printable(path) + " cannot be used (" +
                                                       std::strerror(err) +
                                                       "): create it, or give a --socket in an existing directory");
}

Status SocketServer::Bind(const std::string& path) {
  Impl& m = *impl_;
  m.path = path;
  // The limit is the final path's, which clients connect to. The temporary name is PATH.starting.PID; when that
  // does not fit, a short one in the same directory, bound through an alias of the directory if need be (BindAt).
  if (Status s = CheckPath(path); !s.ok()) return s;
  const std::string pid = std::to_string(getpid());
  m.tmp_path = path + ".starting." + pid;
  if (m.tmp_path.size() >= sizeof(sockaddr_un::sun_path)) {
    const size_t slash = path.rfind('/');
    m.tmp_path = (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + ShortStartingPrefix() + pid;
  }
  if (Status s = ClearStale(path); !s.ok()) return s;
  RemoveStaleStarting(path);
  if (Status s = m.OpenLoop(); !s.ok()) return s;
  m.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (m.listen_fd < 0) return Status::FromErrno(errno, "socket");
  unlink(m.tmp_path.c_str());
  if (Status s = BindAt(m.listen_fd, m.tmp_path); !s.ok()) return s;
  // Whatever the umask: owner only unless --socket-mode/--group say otherwise. Set before listen(), so no
  // connection can come in under wider permissions; SO_PEERCRED is checked on accept as well.
  if (m.o.group != static_cast<gid_t>(-1) && chown(m.tmp_path.c_str(), static_cast<uid_t>(-1), m.o.group) != 0)
    return Status::FromErrno(errno, "chgrp " + m.tmp_path + " to gid " + std::to_string(m.o.group));
  if (chmod(m.tmp_path.c_str(), m.o.socket_mode & 0777) != 0) return Status::FromErrno(errno, "chmod " + m.tmp_path);
  if (listen(m.listen_fd, 4096) != 0) return Status::FromErrno(errno, "listen " + m.tmp_path);
  m.Ctl(EPOLL_CTL_ADD, m.listen_fd, EPOLLIN, kListenKey);
  return Status::Ok();
}

Status SocketServer::Adopt(int fd) {
  Status s = impl_->OpenLoop();
  int fl = s.ok() ? fcntl(fd, F_GETFL) : -1;
  if (s.ok() && (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)) s = Status::FromErrno(errno, "fcntl O_NONBLOCK");
  if (!s.ok()) {
    close(fd);
    return s;
  }
  return impl_->AddConnection(fd) ? Status::Ok() : Status::FromErrno(errno, "epoll_ctl");
}

Status SocketServer::Publish() {
  const std::string& from = impl_->tmp_path;
  const std::string& to = impl_->path;
  // Never over another socket: two ranks of one node given the same --socket would both say "ready" with one of
  // them unreachable. (A stale socket is cleared first; without RENAME_NOREPLACE, a plain rename after that check.)
  // Under Unpublish's lock, so that it removes the name the socket has, never one it had.
  std::lock_guard<std::mutex> g(impl_->unlink_mu);
  if (impl_->unlinked) return Status(Code::kIoError, "the socket was removed before it was published (stopping)");
  for (int tries = 0;; ++tries) {
    int r = renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
    if (r != 0 && errno == EINVAL) {
      if (Status s = ClearStale(to); !s.ok()) return s;
      r = rename(from.c_str(), to.c_str());
    }
    if (r == 0) break;
    if (errno != EEXIST || tries > 0) return Status::FromErrno(errno, "rename " + from + " -> " + to);
    if (Status s = ClearStale(to); !s.ok()) return s;
  }
  impl_->published = true;
  return Status::Ok();
}

bool SocketServer::Poll(int64_t timeout_us) { return impl_->Poll(timeout_us); }

void SocketServer::Wake() {
  if (impl_->wake_fd < 0) return;
  uint64_t one = 1;
  ssize_t r = write(impl_->wake_fd, &one, sizeof one);
  (void)r;  // a full eventfd counter still wakes the loop
}

void SocketServer::Watch(int fd, std::function<void()> on_ready) {
  impl_->on_watch = std::move(on_ready);
  impl_->Ctl(EPOLL_CTL_ADD, fd, EPOLLIN, kWatchKey);
}

void SocketServer::Unpublish() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> g(m.unlink_mu);
  if (m.unlinked || m.listen_fd < 0) return;
  unlink((m.published ? m.path : m.tmp_path).c_str());
  m.unlinked = true;
}

void SocketServer::Stop() {
  Impl& m = *impl_;
  Unpublish();
  for (auto& [id, c] : m.conns) close(c.fd);
  m.conns.clear();
  if (m.listen_fd >= 0) {
    close(m.listen_fd);
    m.listen_fd = -1;
  }
}

std::shared_ptr<ReplyArea> SocketServer::LandFor(uint64_t conn, uint64_t n) {
  auto it = impl_->conns.find(conn);
  if (it == impl_->conns.end()) return nullptr;
  return impl_->AreaFor(it->second, n);
}

void SocketServer::Deliver(uint64_t conn, uint64_t req_id, const Status& s, const char* data, uint64_t n) {
  impl_->Deliver(conn, req_id, s, data, n);
}

}  // namespace fanstore::daemon
