// Unit tests of the daemon client (fanstore/src/daemon_client.cpp) against a fake daemon in this process: no MPI.
// Regressions: replies that lie about their sizes are errors (never SIGBUS / huge allocations), an idle
// connection whose fd number was replaced is neither used nor closed, and fork while another thread fetches
// leaves the child a working fetcher that talks only on its own connections, and the fetch cache is copied with pread
// on a kept descriptor, through the mapping once that descriptor's number is the program's.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon_protocol.hpp"
#include "fanstore/daemon_client.hpp"
#include "fanstore/env.hpp"
#include "remote_fetcher.hpp"
#include "shared_arena.hpp"

namespace fanstore {
namespace {

namespace dp = daemon_proto;

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Sends a reply header (with `pass_fd`, and `extra_fd` in the same control message, riding on it when >= 0), then
// `rest` (message and inline payload).
bool SendReply(int conn, const dp::ReplyHeader& h, const std::string& rest, int pass_fd = -1, int extra_fd = -1) {
  unsigned char hb[dp::kReplyHeaderSize];
  dp::EncodeReplyHeader(h, hb);
  iovec iov{hb, sizeof hb};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(2 * sizeof(int))];
  if (pass_fd >= 0) {
    const int fds[2] = {pass_fd, extra_fd};
    const size_t n = extra_fd >= 0 ? 2 : 1;
    std::memset(cbuf, 0, sizeof cbuf);
    msg.msg_control = cbuf;
    msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(n * sizeof(int));
    std::memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
  }
  ssize_t w;
  do w = sendmsg(conn, &msg, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w != static_cast<ssize_t>(sizeof hb)) return false;
  return rest.empty() || WriteAll(conn, rest.data(), rest.size());
}

dp::ReplyHeader OkHeader(const dp::Request& r, uint64_t payload_size) {
  dp::ReplyHeader h;
  h.type = r.type;
  h.req_id = r.req_id;
  h.payload_size = payload_size;
  return h;
}

// An error reply to `r`: code and message, no payload.
bool SendError(int conn, const dp::Request& r, Code code, const std::string& msg) {
  dp::ReplyHeader h = OkHeader(r, 0);
  h.code = code;
  h.msg_len = static_cast<uint32_t>(msg.size());
  return SendReply(conn, h, msg);
}

// A fake `fanstore serve`: answers hellos itself and hands fetches to `handler` (which writes the reply).
// One thread per connection, so a slow reply does not hold up others.
class FakeDaemon {
 public:
  using Handler = std::function<void(int conn, const dp::Request& r, pid_t peer)>;

  // At `at` (a socket path in a directory the test owns: a daemon restarted there), else in a directory of its own.
  explicit FakeDaemon(Handler handler, std::string at = "") : handler_(std::move(handler)) {
    if (at.empty()) {
      char tmpl[] = "/tmp/fanstore-fake-daemon-XXXXXX";
      dir_ = mkdtemp(tmpl);
      path_ = dir_ + "/sock";
    } else {
      path_ = std::move(at);
    }
    lfd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    if (bind(lfd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd_, 64) != 0) abort();
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~FakeDaemon() {
    stop_.store(true);
    shutdown(lfd_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> g(mu_);
      for (int c : conns_) shutdown(c, SHUT_RDWR);
    }
    for (auto& t : workers_) t.join();
    for (int c : conns_) close(c);
    close(lfd_);
    unlink(path_.c_str());
    if (!dir_.empty()) rmdir(dir_.c_str());
  }

  const std::string& path() const { return path_; }
  int accepts() const { return accepts_.load(); }
  // Answers every hello, after `delay_ms`, with the refusal a daemon gives a uid it does not serve.
  void RefuseHellos(int delay_ms) { refuse_after_ms_.store(delay_ms); }
  // Leaves every later hello unanswered (a stopped or hung daemon), until it is destroyed.
  void HangHellos() { hang_hellos_.store(true); }

 private:
  void AcceptLoop() {
    for (;;) {
      int c = accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR) continue;
        return;  // shut down
      }
      if (stop_.load()) {
        close(c);
        return;
      }
      accepts_.fetch_add(1);
      std::lock_guard<std::mutex> g(mu_);
      conns_.push_back(c);
      workers_.emplace_back([this, c] { Serve(c); });
    }
  }

  void Serve(int c) {
    ucred cred{};
    socklen_t len = sizeof cred;
    getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len);
    for (;;) {
      unsigned char rb[dp::kRequestSize];
      if (!ReadAll(c, rb, sizeof rb)) return;
      dp::Request r;
      if (!dp::DecodeRequest(rb, &r)) return;
      while (r.type == dp::MsgType::kHello && hang_hellos_.load() && !stop_.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (r.type == dp::MsgType::kHello && refuse_after_ms_.load() >= 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(refuse_after_ms_.load()));
        SendError(c, r, Code::kPermission, "uid 65534 may not use this daemon");
        return;
      }
      if (r.type == dp::MsgType::kHello) {
        dp::HelloInfo hi;
        hi.nranks = 1;
        hi.timeout_ms = 2000;
        hi.index_dir = "/nonexistent/index";
        hi.partition_dir = "/nonexistent/parts";
        std::string p = dp::EncodeHello(hi);
        if (!SendReply(c, OkHeader(r, p.size()), p)) return;
        continue;
      }
      handler_(c, r, cred.pid);
    }
  }

  Handler handler_;
  std::string dir_, path_;
  int lfd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepts_{0};
  std::atomic<int> refuse_after_ms_{-1};
  std::atomic<bool> hang_hellos_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> conns_;
  std::vector<std::thread> workers_;
};

// The fake daemons pick their answer by the requested partition number.
Entry MakeEntry(uint32_t id, uint64_t stored_size) {
  Entry e;
  e.id = id;
  e.part = id;
  e.path = "fake/file";
  e.stored_size = stored_size;
  e.size = stored_size;
  return e;
}

// The stored bytes of `e` through `f`, copied out of its view.
Status FetchStored(RemoteFetcher& f, const Entry& e, std::string* out) {
  return f.WithStored(e, [out](const char* d, size_t n) {
    out->assign(d, n);
    return Status::Ok();
  });
}

std::shared_ptr<RemoteFetcher> MustConnect(const FakeDaemon& d) {
  DaemonInfo info;
  auto f = ConnectDaemonFetcher(d.path(), &info);
  if (!f.ok()) {
    ADD_FAILURE() << f.status().ToString();
    return nullptr;
  }
  EXPECT_EQ(info.timeout_ms, 2000u);
  return *f;
}

std::string Pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7);
  return s;
}

// A memfd of `size` bytes holding `content` at `offset`; sealed like the daemon's unless `seal` is false.
int MakeMemfd(uint64_t size, uint64_t offset, const std::string& content, bool seal) {
  int m = memfd_create("fake-payload", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m < 0 || ftruncate(m, static_cast<off_t>(size)) != 0) abort();
  if (!content.empty() &&
      pwrite(m, content.data(), content.size(), static_cast<off_t>(offset)) != static_cast<ssize_t>(content.size()))
    abort();
  if (seal && fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) abort();
  return m;
}

// ---- the internal-fd hook, recording what it was given ----
std::mutex g_marked_mu;
std::vector<std::pair<int, mode_t>> g_marked;  // fd, its file type when marked
void RecordHook(int fd) {
  struct stat st {};
  fstat(fd, &st);
  std::lock_guard<std::mutex> g(g_marked_mu);
  g_marked.emplace_back(fd, st.st_mode & S_IFMT);
}
std::vector<std::pair<int, mode_t>> Marked() {
  std::lock_guard<std::mutex> g(g_marked_mu);
  return g_marked;
}
void ClearMarked() {
  std::lock_guard<std::mutex> g(g_marked_mu);
  g_marked.clear();
}

const std::string kSmall = "hello, fanstore";
const std::string kBig = Pattern(100000, 'a');
constexpr uint64_t kBigOffset = 4096;

// Per-connection reply areas of the fake daemon (fd -> its area memfd), as `fanstore serve` keeps them.
std::mutex g_areas_mu;
std::map<int, int> g_areas;

// Entry 1: inline kSmall. Entry 2: kBig in a sealed memfd at kBigOffset. Entry 3: a daemon-reported timeout.
// Entry 4: kBig in a new reply area (its fd rides along); entry 7: kSmall in the connection's existing area.
// Entries 10..: malformed replies (see the test).
void Handle(int c, const dp::Request& r, pid_t) {
  switch (r.part) {
    case 1: SendReply(c, OkHeader(r, kSmall.size()), kSmall); return;
    case 2: {
      int m = MakeMemfd(kBigOffset + kBig.size(), kBigOffset, kBig, true);
      dp::ReplyHeader h = OkHeader(r, kBig.size());
      h.flags = dp::kPayloadInMemfd;
      h.shm_offset = kBigOffset;
      SendReply(c, h, "", m);
      close(m);
      return;
    }
    case 3: SendError(c, r, Code::kTimeout, "peer rank 2 did not answer"); return;
    case 4: {
      int m = MakeMemfd(1 << 20, 100, kBig, true);
      {
        std::lock_guard<std::mutex> g(g_areas_mu);
        if (g_areas.count(c)) close(g_areas[c]);
        g_areas[c] = dup(m);
      }
      dp::ReplyHeader h = OkHeader(r, kBig.size());
      h.flags = dp::kPayloadInArea | dp::kNewArea;
      h.shm_offset = 100;
      SendReply(c, h, "", m);
      close(m);
      return;
    }
    case 7: {
      int m = -1;
      {
        std::lock_guard<std::mutex> g(g_areas_mu);
        if (g_areas.count(c)) m = g_areas[c];
      }
      if (m >= 0 && pwrite(m, kSmall.data(), kSmall.size(), 5000) != static_cast<ssize_t>(kSmall.size())) abort();
      dp::ReplyHeader h = OkHeader(r, kSmall.size());
      h.flags = dp::kPayloadInArea;
      h.shm_offset = 5000;
      SendReply(c, h, "");
      return;
    }
    case 10: {  // inline payload one byte longer than the stored size
      SendReply(c, OkHeader(r, kSmall.size() + 1), kSmall + "x");
      return;
    }
    case 11: {  // inline payload of 2^62 bytes (would be a huge resize)
      SendReply(c, OkHeader(r, uint64_t{1} << 62), "");
      return;
    }
    case 12: {  // 4 GiB error message
      dp::ReplyHeader h = OkHeader(r, 0);
      h.code = Code::kIoError;
      h.msg_len = 0xFFFFFFFFu;
      SendReply(c, h, "xxxx");
      return;
    }
    case 13: {  // memfd: offset + size overflows
      int m = MakeMemfd(8192, 0, "", true);
      dp::ReplyHeader h = OkHeader(r, 8192);
      h.flags = dp::kPayloadInMemfd;
      h.shm_offset = ~uint64_t{0} - 5;
      SendReply(c, h, "", m);
      close(m);
      return;
    }
    case 14: {  // memfd shorter than offset + size: mapping it and reading would be SIGBUS
      int m = MakeMemfd(4096, 0, "", true);
      dp::ReplyHeader h = OkHeader(r, 8192);
      h.flags = dp::kPayloadInMemfd;
      SendReply(c, h, "", m);
      close(m);
      return;
    }
    case 15: {  // memfd whose size is not sealed (could be truncated while we copy)
      int m = MakeMemfd(8192, 0, "", false);
      dp::ReplyHeader h = OkHeader(r, 8192);
      h.flags = dp::kPayloadInMemfd;
      SendReply(c, h, "", m);
      close(m);
      return;
    }
    case 16: {  // announces a memfd, passes none
      dp::ReplyHeader h = OkHeader(r, 8192);
      h.flags = dp::kPayloadInMemfd;
      SendReply(c, h, "");
      return;
    }
    case 17: {  // wrong request id
      dp::ReplyHeader h = OkHeader(r, kSmall.size());
      h.req_id += 1000;
      SendReply(c, h, kSmall);
      return;
    }
    case 18: {  // code out of range (256 would narrow to kOk)
      dp::ReplyHeader h = OkHeader(r, kSmall.size());
      unsigned char hb[dp::kReplyHeaderSize];
      dp::EncodeReplyHeader(h, hb);
      hb[16] = 0;
      hb[17] = 1;  // code = 256
      WriteAll(c, hb, sizeof hb);
      WriteAll(c, kSmall.data(), kSmall.size());
      return;
    }
    case 19: {  // a new reply area whose size is not sealed
      int m = MakeMemfd(1 << 20, 0, kSmall, false);
      dp::ReplyHeader h = OkHeader(r, kSmall.size());
      h.flags = dp::kPayloadInArea | dp::kNewArea;
      SendReply(c, h, "", m);
      close(m);
      return;
    }
    case 20: {  // a payload past the end of the new area
      int m = MakeMemfd(4096, 0, "", true);
      dp::ReplyHeader h = OkHeader(r, kSmall.size());
      h.flags = dp::kPayloadInArea | dp::kNewArea;
      h.shm_offset = 4090;
      SendReply(c, h, "", m);
      close(m);
      return;
    }
    case 21: {  // two payload places at once
      int m = MakeMemfd(4096, 0, kSmall, true);
      dp::ReplyHeader h = OkHeader(r, kSmall.size());
      h.flags = dp::kPayloadInArea | dp::kPayloadInMemfd;
      SendReply(c, h, "", m);
      close(m);
      return;
    }
    case 23:  // "ok" with no payload for a non-empty read
      SendReply(c, OkHeader(r, 0), "");
      return;
    case 22: {  // an fd nobody announced, with an inline payload
      int m = MakeMemfd(4096, 0, "", true);
      SendReply(c, OkHeader(r, kSmall.size()), kSmall, m);
      close(m);
      return;
    }
    default: {
      dp::ReplyHeader h = OkHeader(r, 0);
      h.code = Code::kNotFound;
      SendReply(c, h, "");
    }
  }
}

TEST(DaemonClient, FetchesInlineAndMemfdPayloadsAndKeepsTheConnection) {
  FakeDaemon d(Handle);
  auto f = MustConnect(d);
  ASSERT_TRUE(f);
  ClearMarked();
  f->SetInternalFdHook(&RecordHook);
  int probes = d.accepts();  // the handshake probe of ConnectDaemonFetcher
  std::string out;
  ASSERT_TRUE(FetchStored(*f, MakeEntry(1, kSmall.size()), &out).ok());
  EXPECT_EQ(out, kSmall);
  Status s = FetchStored(*f, MakeEntry(2, kBig.size()), &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, kBig);
  s = FetchStored(*f, MakeEntry(3, 10), &out);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_NE(s.message().find("peer rank 2 did not answer"), std::string::npos) << s.message();
  ASSERT_TRUE(FetchStored(*f, MakeEntry(1, kSmall.size()), &out).ok());
  EXPECT_EQ(d.accepts(), probes + 1) << "one connection carries every complete reply";
  // Both the connection and the passed memfd were handed to the internal-fd hook.
  bool sock = false, reg = false;
  for (auto [fd, type] : Marked()) {
    sock |= type == S_IFSOCK;
    reg |= type == S_IFREG;
  }
  EXPECT_TRUE(sock);
  EXPECT_TRUE(reg);
}

// The number of this process's open descriptors.
int OpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

// The defect: RecvAll read only the first descriptor of a control message whose buffer holds two, so a broken
// daemon that passed two with a reply leaked one per reply. Both are received and the unexpected one closed.
TEST(DaemonClient, ASecondDescriptorInOneReplyIsClosed) {
  FakeDaemon d([](int c, const dp::Request& r, pid_t) {
    int m = MakeMemfd(kBigOffset + kBig.size(), kBigOffset, kBig, true), extra = MakeMemfd(1, 0, "x", true);
    dp::ReplyHeader h = OkHeader(r, kBig.size());
    h.flags = dp::kPayloadInMemfd;
    h.shm_offset = kBigOffset;
    SendReply(c, h, "", m, extra);
    close(m);
    close(extra);
  });
  auto f = MustConnect(d);
  ASSERT_TRUE(f);
  std::string out;
  ASSERT_TRUE(FetchStored(*f, MakeEntry(2, kBig.size()), &out).ok());  // the pooled connection is open now
  const int before = OpenFds();
  for (int i = 0; i < 20; ++i) {
    Status s = FetchStored(*f, MakeEntry(2, kBig.size()), &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out, kBig);
  }
  // (The fake closes its two memfds after the reply is sent: a count may include them for a moment.)
  int after = OpenFds();
  for (int i = 0; i < 200 && after > before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = OpenFds();
  }
  EXPECT_LE(after, before) << "descriptors leaked over 20 replies";
}

// The defect: after the daemon was restarted, each idle pooled connection (closed by the old daemon) failed its next
// request with EIO. The request goes once more on a fresh connection to the new daemon.
TEST(DaemonClient, ARestartedDaemonCostsNoFailedRead) {
  char tmpl[] = "/tmp/fanstore-restart-XXXXXX";
  const std::string dir = mkdtemp(tmpl), path = dir + "/sock";
  auto old_daemon = std::make_unique<FakeDaemon>(Handle, path);
  auto f = MustConnect(*old_daemon);
  ASSERT_TRUE(f);
  std::string out;
  ASSERT_TRUE(FetchStored(*f, MakeEntry(1, kSmall.size()), &out).ok());
  old_daemon.reset();  // its connections are closed
  FakeDaemon new_daemon(Handle, path);
  for (int i = 0; i < 3; ++i) {
    Status s = FetchStored(*f, MakeEntry(1, kSmall.size()), &out);
    ASSERT_TRUE(s.ok()) << "read " << i << " after the restart: " << s.ToString();
    EXPECT_EQ(out, kSmall);
  }
  EXPECT_EQ(new_daemon.accepts(), 1) << "one fresh connection";
  rmdir(dir.c_str());
}

// The defect: a hello that waited out the timeout (a stopped daemon, a process with no idle connection) started no
// fail-at-once window, so every read waited a whole timeout again (3 per chunk: two for the fetch cache's map).
TEST(DaemonClient, AHelloThatTimesOutMakesTheNextRequestsFailAtOnce) {
  FakeDaemon d(Handle);
  auto f = MustConnect(d);  // (its probe connection is not pooled: the next request connects)
  ASSERT_TRUE(f);
  d.HangHellos();
  std::string out;
  auto t0 = std::chrono::steady_clock::now();
  Status s = FetchStored(*f, MakeEntry(1, kSmall.size()), &out);
  const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    s = FetchStored(*f, MakeEntry(1, kSmall.size()), &out);
    EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
    EXPECT_FALSE(f->CachesNodeWide());
  }
  const double next = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(first, 1.5) << "the first request waits out the 2 s timeout";
  EXPECT_LT(next, 1.0) << "5 requests and 5 cache lookups after it took " << next << " s";
  EXPECT_NE(s.message().find("failing at once"), std::string::npos) << s.ToString();
}

TEST(DaemonClient, NodeInTheSocketPathIsThisNodesDaemon) {
  // FANSTORE_DAEMON=/tmp/{node}/sock set by hand (LD_PRELOAD without `fanstore run`) reaches this node's socket.
  FakeDaemon d(Handle);
  std::string dir = d.path().substr(0, d.path().rfind('/'));
  std::string node = dir.substr(dir.rfind('/') + 1);
  const char* old = getenv(env::kSlurmNodeName);
  std::string saved = old ? old : "";
  setenv(env::kSlurmNodeName, node.c_str(), 1);
  DaemonInfo info;
  auto f = ConnectDaemonFetcher("/tmp/{node}/sock", &info);
  auto bad = ConnectDaemonFetcher("/tmp/{node}/nosock", &info);
  if (old) setenv(env::kSlurmNodeName, saved.c_str(), 1);
  else unsetenv(env::kSlurmNodeName);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::string out;
  ASSERT_TRUE(FetchStored(**f, MakeEntry(1, kSmall.size()), &out).ok());
  EXPECT_EQ(out, kSmall);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir + "/nosock"), std::string::npos)
      << "the error names the expanded path: " << bad.status().message();
}

TEST(DaemonClient, RepliesThatLieAboutSizesAreErrorsNotCrashes) {
  FakeDaemon d(Handle);
  auto f = MustConnect(d);
  ASSERT_TRUE(f);
  std::string out;
  ASSERT_TRUE(FetchStored(*f, MakeEntry(1, kSmall.size()), &out).ok());  // an idle connection exists
  struct Case {
    uint32_t entry;
    uint64_t stored;
    const char* what;  // part of the expected message
  } cases[] = {
      {10, kSmall.size(), "payload bytes"},
      {11, kSmall.size(), "payload bytes"},
      {12, 0, "message"},
      {13, 8192, "offset"},
      {14, 8192, "4096-byte memfd"},
      {15, 8192, "not sealed"},
      {16, 8192, "passed no fd"},
      {17, kSmall.size(), "out-of-order"},
      {18, kSmall.size(), "malformed"},
      {19, kSmall.size(), "not sealed"},
      {20, kSmall.size(), "4096-byte reply area"},
      {21, kSmall.size(), "two payload places"},
      {22, kSmall.size(), "did not announce"},
      {23, kSmall.size(), "0 payload bytes"},
      {7, kSmall.size(), "0-byte reply area"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("entry " + std::to_string(c.entry));
    int before = d.accepts();
    Status s = FetchStored(*f, MakeEntry(c.entry, c.stored), &out);
    EXPECT_EQ(s.code(), Code::kIoError) << s.ToString();
    EXPECT_NE(s.message().find(c.what), std::string::npos) << s.message();
    // The broken connection was dropped: the next fetch works, on a fresh connection.
    s = FetchStored(*f, MakeEntry(1, kSmall.size()), &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out, kSmall);
    EXPECT_EQ(d.accepts(), before + 1);
  }
}

// A reply area comes once per connection, is mapped, and later replies are read from it in place (no fd).
TEST(DaemonClient, ReadsFromTheConnectionsReplyArea) {
  FakeDaemon d(Handle);
  auto f = MustConnect(d);
  ASSERT_TRUE(f);
  std::string out;
  Status s = FetchStored(*f, MakeEntry(4, kBig.size()), &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, kBig);
  int conns = d.accepts();
  // In place: the view handed to `use` lies in the area, whose fd the client did not keep.
  s = f->WithStored(7, 0, kSmall.size(), [&](const char* data, size_t n) {
    out.assign(data, n);
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, kSmall);
  EXPECT_EQ(d.accepts(), conns) << "the area's connection was reused";
  // use's own failure comes back as is (a checksum mismatch must stay kCorrupt, not become a transport error).
  s = f->WithStored(7, 0, kSmall.size(), [](const char*, size_t) { return Status(Code::kCorrupt, "bad sum"); });
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_EQ(s.message(), "bad sum");
}

// The program replaces our idle connection's fd number (a close-all loop the interposer did not see, then
// its own socket or pipe got the number; dup2 does both at once). The fetcher must not send on it and must
// not close it.
TEST(DaemonClient, ReplacedIdleFdIsNeitherUsedNorClosed) {
  FakeDaemon d(Handle);
  auto f = MustConnect(d);
  ASSERT_TRUE(f);
  ClearMarked();
  f->SetInternalFdHook(&RecordHook);
  std::string out;
  ASSERT_TRUE(FetchStored(*f, MakeEntry(1, kSmall.size()), &out).ok());
  int conn = -1;
  for (auto [fd, type] : Marked())
    if (type == S_IFSOCK) conn = fd;
  ASSERT_GE(conn, 0) << "the connection was not marked internal";

  // 1: the program's own socket now has the number.
  int prog[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, prog), 0);
  ASSERT_EQ(dup2(prog[0], conn), conn);
  struct stat want;
  ASSERT_EQ(fstat(prog[0], &want), 0);
  int before = d.accepts();
  Status s = FetchStored(*f, MakeEntry(1, kSmall.size()), &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, kSmall);
  EXPECT_EQ(d.accepts(), before + 1) << "a fresh connection was made";
  struct stat now;
  ASSERT_EQ(fstat(conn, &now), 0) << "the program's fd was closed";
  EXPECT_EQ(now.st_ino, want.st_ino);
  char buf[64];
  EXPECT_EQ(recv(prog[1], buf, sizeof buf, MSG_DONTWAIT), -1) << "our request went into the program's socket";
  EXPECT_EQ(errno, EAGAIN);

  // 2: a pipe gets the number of the (new) idle connection: send would fail with ENOTSOCK, and the old code
  // then closed the program's pipe.
  int conn2 = -1;
  for (auto [fd, type] : Marked())
    if (type == S_IFSOCK && fd != conn) conn2 = fd;
  ASSERT_GE(conn2, 0);
  int pfd[2];
  ASSERT_EQ(pipe2(pfd, O_CLOEXEC), 0);
  ASSERT_EQ(dup2(pfd[0], conn2), conn2);
  ASSERT_EQ(fstat(pfd[0], &want), 0);
  s = FetchStored(*f, MakeEntry(1, kSmall.size()), &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(fstat(conn2, &now), 0) << "the program's pipe was closed";
  EXPECT_EQ(now.st_ino, want.st_ino);

  f.reset();  // the destructor must not close them either
  EXPECT_NE(fcntl(conn, F_GETFD), -1);
  EXPECT_NE(fcntl(conn2, F_GETFD), -1);
  ASSERT_EQ(fstat(conn, &now), 0);
  ASSERT_EQ(fstat(prog[0], &want), 0);
  EXPECT_EQ(now.st_ino, want.st_ino);
  for (int fd : {prog[0], prog[1], pfd[0], pfd[1], conn, conn2}) close(fd);
}

// Entry 5 answers at once, entry 6 after 50 ms; both with the peer's pid (as seen at connect), so the
// child can tell whether its request travelled on its own connection.
void HandlePid(int c, const dp::Request& r, pid_t peer) {
  if (r.part == 6) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016d", static_cast<int>(peer));
  std::string p(buf, 16);
  SendReply(c, OkHeader(r, p.size()), p);
}

std::string PidPayload(pid_t pid) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016d", static_cast<int>(pid));
  return std::string(buf, 16);
}

// Runs in a forked child: fetch on a fresh connection within 5 s (a deadlock is killed by the alarm).
[[noreturn]] void ChildFetch(RemoteFetcher* f) {
  alarm(5);
  std::string out;
  Status s = FetchStored(*f, MakeEntry(5, 16), &out);
  if (!s.ok()) _exit(2);
  if (out != PidPayload(getpid())) _exit(3);  // talked on the parent's connection
  _exit(0);
}

TEST(DaemonClient, ForkWhileAnotherThreadFetches) {
  FakeDaemon d(HandlePid);
  auto f = MustConnect(d);
  ASSERT_TRUE(f);
  std::atomic<bool> stop{false};
  std::atomic<int> fetched{0}, failed{0};
  std::vector<std::thread> busy;
  for (int t = 0; t < 3; ++t)
    busy.emplace_back([&, t] {
      std::string out;
      for (uint32_t i = 0; !stop.load(); ++i) {
        Status s = FetchStored(*f, MakeEntry((i + t) % 4 == 0 ? 6 : 5, 16), &out);
        if (s.ok() && out == PidPayload(getpid())) fetched.fetch_add(1);
        else failed.fetch_add(1);
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int i = 0; i < 30; ++i) {
    SCOPED_TRACE("fork " + std::to_string(i));
    const bool hooks = i % 5 != 4;  // every fifth fork runs without the atfork hooks (owner check path)
    if (hooks) f->AtForkPrepare();
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (hooks) f->AfterForkChild();
      ChildFetch(f.get());
    }
    if (hooks) f->AtForkParent();
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st)) << "child killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0)
                               << " (SIGALRM = deadlock)";
    if (WIFEXITED(st)) {
      EXPECT_EQ(WEXITSTATUS(st), 0) << "2: fetch failed, 3: used the parent's connection";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  stop.store(true);
  for (auto& t : busy) t.join();
  EXPECT_GT(fetched.load(), 0);
  EXPECT_EQ(failed.load(), 0);
}

// `fanstore wait` on a daemon that refuses us must say so when time runs out, even when the last probe,
// started just before the deadline, had too little time left to hear the (slow) refusal.
TEST(DaemonClient, WaitReportsTheRefusalNotTheLastProbesTimeout) {
  FakeDaemon d(HandlePid);
  d.RefuseHellos(30);
  Status s = WaitForDaemon(d.path(), 1000);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_NE(s.message().find("may not use this daemon"), std::string::npos) << s.ToString();
}

// The fd hook is called with the pool's lock held: one that blocks in the parent keeps that lock held across a
// fork without the atfork hooks (a raw clone), the way a thread preempted inside the pool would.
std::atomic<bool> g_hook_release{false};
std::atomic<int> g_hook_entered{0};
pid_t g_hook_blocks_in = 0;
void BlockingHook(int) {
  if (getpid() != g_hook_blocks_in) return;
  g_hook_entered.fetch_add(1);
  while (!g_hook_release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// A child forked without the hooks while another thread holds the pool's lock must not deadlock on it: its
// first fetch takes the pool over (fresh locks, the parent's connections dropped) and uses its own connection.
TEST(DaemonClient, HooklessForkWhileAThreadHoldsThePoolLock) {
  FakeDaemon d(HandlePid);
  auto f = MustConnect(d);
  ASSERT_TRUE(f);
  std::string out;
  ASSERT_TRUE(FetchStored(*f, MakeEntry(5, 16), &out).ok());  // one pooled connection for the hook to visit
  g_hook_blocks_in = getpid();
  g_hook_release = false;
  g_hook_entered = 0;
  std::thread holder([&] { f->SetInternalFdHook(&BlockingHook); });
  while (g_hook_entered.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ChildFetch(f.get());
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  g_hook_release = true;
  holder.join();
  EXPECT_TRUE(WIFEXITED(st)) << "child killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0)
                             << " (SIGALRM = deadlock on the parent's lock)";
  if (WIFEXITED(st)) {
    EXPECT_EQ(WEXITSTATUS(st), 0) << "2: fetch failed, 3: used the parent's connection";
  }
  f->SetInternalFdHook(nullptr);
  ASSERT_TRUE(FetchStored(*f, MakeEntry(5, 16), &out).ok());
  EXPECT_EQ(out, PidPayload(getpid()));
}

// A child forked without the atfork hooks (posix_spawn-like code, or a front end that does not call them)
// reuses the parent's fd number for its own pipe before its first fetch: the fetcher must drop the
// inherited connection without closing that number, and fetch on a connection of its own.
TEST(DaemonClient, ForkedChildNeverClosesAnInheritedNumberThatIsNotOurs) {
  FakeDaemon d(HandlePid);
  auto f = MustConnect(d);
  ASSERT_TRUE(f);
  ClearMarked();
  f->SetInternalFdHook(&RecordHook);
  std::string out;
  ASSERT_TRUE(FetchStored(*f, MakeEntry(5, 16), &out).ok());
  int conn = -1;
  for (auto [fd, type] : Marked())
    if (type == S_IFSOCK) conn = fd;
  ASSERT_GE(conn, 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(5);
    int p[2];
    if (pipe(p) != 0 || dup2(p[0], conn) != conn) _exit(5);
    struct stat want, now;
    if (fstat(p[0], &want) != 0) _exit(5);
    std::string got;
    if (!FetchStored(*f, MakeEntry(5, 16), &got).ok()) _exit(2);
    if (got != PidPayload(getpid())) _exit(3);
    if (fstat(conn, &now) != 0 || now.st_ino != want.st_ino) _exit(4);  // the child's pipe was closed
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "2: fetch failed, 3: used the parent's connection, 4: closed the child's pipe";
  // The parent's connection is untouched by the child.
  int before = d.accepts();
  ASSERT_TRUE(FetchStored(*f, MakeEntry(5, 16), &out).ok());
  EXPECT_EQ(out, PidPayload(getpid()));
  EXPECT_EQ(d.accepts(), before);
}

// Bytes this thread read through read/pread so far (/proc/thread-self/io's rchar; -1 when not available).
long long ThreadReadBytes() {
  FILE* f = std::fopen("/proc/thread-self/io", "re");
  if (!f) return -1;
  long long v = -1;
  char line[128];
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "rchar: %lld", &v) == 1) break;
  std::fclose(f);
  return v;
}

// The fetch cache, as the real daemon lays it out (SharedArena): a cached range is copied by pread on the memfd
// descriptor the fetcher keeps. Once the program closed that number and opened a file of its own on it, the range
// comes through the mapping: the right bytes, the program's file neither read nor closed.
TEST(DaemonClient, NodeCacheHitsUsePreadThenTheMappingOnceTheFdIsNotOurs) {
  Status why;
  auto arena = daemon::SharedArena::Create(4 << 20, &why);
  ASSERT_TRUE(arena) << why.ToString();
  const std::string want = Pattern(100000, 'k');
  daemon::ArenaBlock block = arena->Allocate(want.size());
  ASSERT_TRUE(block);
  std::memcpy(block.data(), want.data(), want.size());
  int slot = arena->Publish(3, 4096, want.size(), block.data());
  ASSERT_GE(slot, 0);
  std::atomic<int> fetches{0};
  FakeDaemon d([&](int c, const dp::Request& r, pid_t) {
    if (r.type == dp::MsgType::kCacheMap) {
      dp::ReplyHeader h = OkHeader(r, 0);
      h.flags = dp::kCacheMemfd;
      SendReply(c, h, "", arena->fd());
      return;
    }
    fetches.fetch_add(1);
    SendError(c, r, Code::kIoError, "not expected: the range is in the fetch cache");
  });
  auto f = MustConnect(d);
  ASSERT_TRUE(f);
  ClearMarked();
  f->SetInternalFdHook(&RecordHook);
  ASSERT_TRUE(f->CachesNodeWide());
  int kept = -1;
  for (auto [fd, type] : Marked())
    if (type == S_IFREG) kept = fd;
  ASSERT_GE(kept, 0) << "the fetcher kept no descriptor of the cache (or did not mark it internal)";

  std::string out(want.size(), '\0');
  long long r0 = ThreadReadBytes();
  ASSERT_TRUE(f->CopyCached(3, 4096, want.size(), out.data()));
  long long r1 = ThreadReadBytes();
  EXPECT_TRUE(out == want) << "wrong bytes";
  if (r0 >= 0) {
    EXPECT_GE(r1 - r0, static_cast<long long>(want.size())) << "the copy was not made by pread";
  }
  EXPECT_FALSE(f->CopyCached(3, 4096 + 1, want.size(), out.data())) << "only exact ranges are found";

  // The program closes the number and opens a file of its own on it, of the same size, holding other bytes.
  int impostor = MakeMemfd(arena->data_len() + (64 << 20), 0, std::string(8 << 20, '\xEE'), false);
  ASSERT_EQ(dup2(impostor, kept), kept);
  struct stat before;
  ASSERT_EQ(fstat(kept, &before), 0);
  out.assign(want.size(), '\0');
  r0 = ThreadReadBytes();
  ASSERT_TRUE(f->CopyCached(3, 4096, want.size(), out.data()));
  r1 = ThreadReadBytes();
  EXPECT_TRUE(out == want) << "the bytes came from the program's file";
  if (r0 >= 0) {
    EXPECT_LT(r1 - r0, static_cast<long long>(want.size())) << "the program's file was read";
  }
  EXPECT_EQ(fetches.load(), 0);
  arena->Withdraw(slot);
  EXPECT_FALSE(f->CopyCached(3, 4096, want.size(), out.data())) << "a withdrawn range is not found";

  f.reset();  // nor does the destructor close the program's file
  struct stat now;
  ASSERT_EQ(fstat(kept, &now), 0) << "the program's file was closed";
  EXPECT_EQ(now.st_ino, before.st_ino);
  char b = 0;
  ASSERT_EQ(pread(kept, &b, 1, 4096), 1);
  EXPECT_EQ(b, '\xEE');
  close(kept);
  close(impostor);
}

TEST(Protocol, PayloadMemfdSizeIsSealed) {
  int fd = -1;
  void* map = nullptr;
  ASSERT_TRUE(dp::CreatePayloadMemfd(8192, &fd, &map).ok());
  munmap(map, 8192);
  int seals = fcntl(fd, F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SHRINK);
  EXPECT_TRUE(seals & F_SEAL_GROW);
  EXPECT_NE(ftruncate(fd, 100), 0);
  close(fd);
}

}  // namespace
}  // namespace fanstore
