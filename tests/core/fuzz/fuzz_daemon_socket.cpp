// libFuzzer target: the client <-> daemon socket protocol, against the daemon's real client-facing half
// (SocketServer, FetchRouter, the FetchCache of fetched bytes in its shared arena, the prefetcher, StagedReader
// over a staged partition) on socketpairs. Only the other nodes are fake: FakePeers answers a fetch of partition
// 1 with the right bytes of the whole image, a little later (so fetches join and land in the cache).
//
// Input: a sequence of operations on 3 connections (Ops below): fetches whose ranges are picked from the files
// of the image, from values near 2^64, 2^62 and the partition ends, or taken raw; 48-byte headers taken raw
// (magic, version and type fixed up or not); prefetch hints of real or junk paths with a true or false body
// length; hellos and cache-map requests; junk; closes.
//
// The oracle, on each connection: replies come in the order of the requests, with their req_id and type; a
// successful fetch reply covers a range inside its partition, has exactly the length asked for and the
// partition's bytes at that offset; no crash or sanitizer report; the server survives everything.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "daemon_protocol.hpp"
#include "fanstore/image.hpp"
#include "fanstore/pack.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "fanstore/protocol/range_check.hpp"
#include "fetch_cache.hpp"
#include "fetch_router.hpp"
#include "fuzz_common.hpp"
#include "peer_fetcher.hpp"
#include "socket_server.hpp"
#include "staged_reader.hpp"
#include "stats.hpp"

namespace {

using namespace fanstore;
using namespace fanstore::daemon;
namespace dp = fanstore::daemon_proto;

[[noreturn]] void Finding(const char* what) {
  std::fprintf(stderr, "fuzz_daemon_socket: %s\n", what);
  __builtin_trap();
}

std::string ReadFile(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) abort();
  char buf[1 << 16];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) abort();
  close(fd);
}

// The other nodes: each fetch is answered on a later Step with the bytes of the whole image's partition, or the
// error a real peer gives for a range outside it.
class FakePeers final : public PeerFetcher {
 public:
  explicit FakePeers(const std::vector<std::string>* parts) : parts_(parts) {}
  void Fetch(const ByteRange& r, FetchSink* sink) override { queue_.push_back({r, sink}); }
  bool Step() {
    if (queue_.empty()) return false;
    auto [r, sink] = queue_.front();
    queue_.pop_front();
    const std::string* p = r.part < parts_->size() ? &(*parts_)[r.part] : nullptr;
    if (!p || !RangeWithin(r.offset, r.length, p->size())) {
      sink->Done(Status(Code::kInvalidArgument, "outside the partition"), nullptr, 0);
      return true;
    }
    char* dst = sink->Land(r.length ? r.length : 1);
    if (!dst) {
      sink->Done(Status(Code::kNoMemory, "no memory"), nullptr, 0);
      return true;
    }
    std::memcpy(dst, p->data() + r.offset, r.length);
    sink->Done(Status::Ok(), dst, r.length);
    return true;
  }
  bool idle() const { return queue_.empty(); }

 private:
  const std::vector<std::string>* parts_;
  std::deque<std::pair<ByteRange, FetchSink*>> queue_;
};

// One daemon, made once: an image of two partitions, partition 0 staged here, partition 1 on the fake peers.
struct Daemon {
  std::vector<std::string> parts;  // the whole image's partition files
  std::vector<ByteRange> ranges;   // stored ranges of files and chunks, for picking fetches
  std::vector<std::string> paths;  // image-relative paths, for hints
  std::shared_ptr<const Image> img;
  std::unique_ptr<StagedReader> staged;
  std::unique_ptr<FakePeers> peers;
  std::unique_ptr<FetchCache> cache;
  DaemonStats stats;
  std::unique_ptr<SocketServer> server;
  std::unique_ptr<FetchRouter> router;
};

Daemon* MakeDaemon() {
  auto* d = new Daemon;
  const std::string& dir = fuzz::ScratchDir();
  const std::string src = dir + "/src", image = dir + "/img", local = dir + "/local";
  for (const std::string& sub : {src, src + "/a", local})
    if (mkdir(sub.c_str(), 0700) != 0) abort();
  // Compressible and random files; one of several 64 KiB chunks.
  uint64_t x = 42;
  auto rnd = [&x] { return (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int i = 0; i < 12; ++i) {
    std::string bytes(static_cast<size_t>(i == 5 ? 300000 : 1000 + 7919 * i), '\0');
    for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>(i % 2 ? 'a' + k % 7 : rnd());
    WriteFile(src + (i % 3 ? "/a/f" : "/f") + std::to_string(i), bytes);
  }
  PackOptions po;
  po.source = src;
  po.output = image;
  po.parts = 2;
  po.threads = 1;
  po.chunk_size = 64 << 10;
  if (!Pack(po).ok()) abort();
  for (uint32_t p = 0; p < 2; ++p) {
    char name[32];
    std::snprintf(name, sizeof name, "/part-%05u.fsp", p);
    d->parts.push_back(ReadFile(image + name));
    if (p == 0) WriteFile(local + name, d->parts.back());
  }
  ImageOpenOptions io;
  io.partition_dir = local;
  auto img = Image::Open(image, io);
  if (!img.ok()) abort();
  d->img = *img;
  for (uint32_t id = 0; id < d->img->size(); ++id) {
    Entry e = d->img->Get(id);
    if (!e.is_reg()) continue;
    d->paths.emplace_back(e.path);
    d->ranges.push_back({e.part, e.offset, e.stored_size});
    for (uint64_t i = 0; i < d->img->ChunkCount(e); ++i)
      if (auto c = d->img->GetChunk(e, i); c.ok()) d->ranges.push_back({e.part, c->offset, c->stored_size});
  }
  // Every partition here, complete (empty piece ends), as staging leaves them.
  d->staged = std::make_unique<StagedReader>(d->img->PartitionCount());
  for (uint32_t p = 0; p < d->img->PartitionCount(); ++p) {
    if (!d->img->HasPartition(p)) continue;
    const std::string path = d->img->PartitionPath(p);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) abort();
    d->staged->Begin(p, fd, path, static_cast<uint64_t>(st.st_size), {});
  }
  d->peers = std::make_unique<FakePeers>(&d->parts);
  d->cache = std::make_unique<FetchCache>(8u << 20);
  ServerOptions so;
  so.partitions = d->img->PartitionCount();
  so.hello.index_dir = image;
  so.hello.partition_dir = local;
  so.cache_fd = d->cache->shared_fd();
  d->server = std::make_unique<SocketServer>(so, &d->stats);
  d->router = std::make_unique<FetchRouter>(d->img, d->staged.get(), d->peers.get(), d->cache.get(), d->server.get(),
                                            &d->stats, RouterOptions{});
  d->server->SetHandler(d->router.get());
  return d;
}

Daemon& D() {
  static Daemon* d = MakeDaemon();
  return *d;
}

// The input, read front to back; zeros once it is used up.
struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t Byte() { return n ? (--n, *p++) : 0; }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{Byte()} << (8 * i);
    return v;
  }
  std::string Bytes(size_t k) {
    k = k < n ? k : n;
    std::string s(reinterpret_cast<const char*>(p), k);
    p += k;
    n -= k;
    return s;
  }
};

// What a connection has been sent, framed as the server frames it (so that the replies can be told apart).
struct Expect {
  dp::MsgType type;
  uint64_t req_id;
  ByteRange range;  // a fetch's
};

struct Conn {
  int fd = -1;
  std::string sent;        // not framed yet
  uint64_t body_left = 0;  // of a hint the server is still reading
  bool dropped = false;    // a header the server rejects: it closes the connection
  std::deque<Expect> expect;
  std::string rx;
  int rx_fd = -1;        // came with the reply being read
  char* area = nullptr;  // the connection's reply area, as the client maps it
  size_t area_size = 0;

  void Frame() {
    while (!dropped) {
      if (body_left) {
        uint64_t k = std::min<uint64_t>(body_left, sent.size());
        sent.erase(0, k);
        body_left -= k;
        if (body_left) return;
        continue;
      }
      if (sent.size() < dp::kRequestSize) return;
      dp::Request r;
      if (!dp::DecodeRequest(reinterpret_cast<const unsigned char*>(sent.data()), &r)) {
        dropped = true;
        return;
      }
      sent.erase(0, dp::kRequestSize);
      expect.push_back({r.type, r.req_id, ByteRange{r.part, r.offset, r.length}});
      if (r.type == dp::MsgType::kPrefetch) body_left = r.body_len;
    }
  }
  void Close() {
    if (area) munmap(area, area_size);
    if (rx_fd >= 0) close(rx_fd);
    if (fd >= 0) close(fd);
    *this = Conn();
  }
};

Status Open(Conn* c) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) abort();
  c->fd = sv[0];
  return D().server->Adopt(sv[1]);
}

// Checks one fetch reply against the partition (the oracle); its bytes too unless payload is null.
void CheckFetch(const Expect& e, const dp::ReplyHeader& h, const char* payload) {
  if (h.code != Code::kOk) return;
  const std::string* part = e.range.part < D().parts.size() ? &D().parts[e.range.part] : nullptr;
  if (!part || !RangeWithin(e.range.offset, e.range.length, part->size()))
    Finding("success for a range outside its partition");
  if (h.payload_size != e.range.length) Finding("a fetch reply of another length than asked for");
  if (payload && e.range.length && std::memcmp(payload, part->data() + e.range.offset, e.range.length) != 0)
    Finding("a fetch reply with other bytes than the partition's");
}

// Parses and checks the whole replies buffered on c.
void TakeReplies(Conn* c) {
  for (;;) {
    if (c->rx.size() < dp::kReplyHeaderSize) return;
    dp::ReplyHeader h;
    if (!dp::DecodeReplyHeader(reinterpret_cast<const unsigned char*>(c->rx.data()), &h))
      Finding("a reply header that does not decode");
    const bool in_shm = h.flags & (dp::kPayloadInArea | dp::kPayloadInMemfd);
    if (h.msg_len > dp::kMaxReplyMessage) Finding("a reply message over the limit");
    const uint64_t inline_len = in_shm ? 0 : h.payload_size;
    if (inline_len > dp::kMaxHelloPayload) Finding("an inline payload over the limit");
    const uint64_t whole = dp::kReplyHeaderSize + h.msg_len + inline_len;
    if (c->rx.size() < whole) return;
    if (c->expect.empty()) Finding("a reply to no request");
    Expect e = c->expect.front();
    c->expect.pop_front();
    if (h.req_id != e.req_id || h.type != e.type) Finding("a reply out of order");
    const char* payload = c->rx.data() + dp::kReplyHeaderSize + h.msg_len;
    char* map = nullptr;
    size_t map_len = 0;
    if (h.flags & (dp::kNewArea | dp::kPayloadInMemfd | dp::kCacheMemfd)) {
      if (c->rx_fd < 0) Finding("a reply that promises an fd without one");
      struct stat st;
      if (fstat(c->rx_fd, &st) != 0) abort();
      if (h.flags & dp::kCacheMemfd) {
        close(c->rx_fd);
      } else {
        void* m =
            st.st_size ? mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, c->rx_fd, 0) : nullptr;
        close(c->rx_fd);
        if (m == MAP_FAILED) abort();
        if (h.flags & dp::kNewArea) {
          if (c->area) munmap(c->area, c->area_size);
          c->area = static_cast<char*>(m);
          c->area_size = static_cast<size_t>(st.st_size);
        } else {
          map = static_cast<char*>(m);
          map_len = static_cast<size_t>(st.st_size);
        }
      }
      c->rx_fd = -1;
    }
    if (h.code == Code::kOk && (h.flags & dp::kPayloadInArea)) {
      if (!c->area || !RangeWithin(h.shm_offset, h.payload_size, c->area_size)) Finding("a payload outside the area");
      payload = c->area + h.shm_offset;
    } else if (h.code == Code::kOk && (h.flags & dp::kPayloadInMemfd)) {
      if (!RangeWithin(h.shm_offset, h.payload_size, map_len)) Finding("a payload outside its memfd");
      payload = map + h.shm_offset;
    }
    // The area holds the payload until the server takes our next request: a pipelined one may be there already.
    const bool intact = !(h.flags & dp::kPayloadInArea) || c->expect.empty();
    if (e.type == dp::MsgType::kFetch) CheckFetch(e, h, intact ? payload : nullptr);
    if (map) munmap(map, map_len);
    c->rx.erase(0, whole);
  }
}

void Receive(Conn* c) {
  if (c->fd < 0) return;
  for (;;) {
    char buf[1 << 16];
    iovec iov{buf, sizeof buf};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    ssize_t n = recvmsg(c->fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n <= 0) return;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(cm), sizeof fd);
        if (c->rx_fd >= 0) Finding("two fds for one reply");
        c->rx_fd = fd;
      }
    c->rx.append(buf, static_cast<size_t>(n));
    TakeReplies(c);
  }
}

// Runs the daemon (server, router, peers) and the clients' receives until nothing moves.
void Settle(Conn* conns, int n) {
  for (int idle = 0; idle < 3;) {
    bool moved = D().server->Poll(0);
    moved |= D().peers->Step();
    moved |= D().router->Pump();
    for (int i = 0; i < n; ++i) Receive(&conns[i]);
    idle = moved ? 0 : idle + 1;
  }
}

// Sends what the socket takes, letting the daemon run when it is full; what was sent is framed before the
// daemon can answer it.
void Send(Conn* conns, int n, Conn* c, const std::string& bytes) {
  for (size_t off = 0, stalls = 0; c->fd >= 0 && off < bytes.size() && stalls < 64;) {
    ssize_t w = send(c->fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c->sent.append(bytes, off, static_cast<size_t>(w));
      c->Frame();
      off += static_cast<size_t>(w);
      continue;
    }
    ++stalls;  // the server is not reading (busy, or waiting for us): let it run
    Settle(conns, n);
  }
}

std::string Header(dp::MsgType type, uint64_t req_id, const ByteRange& r, uint64_t stream, uint32_t flags,
                   uint64_t body_len) {
  dp::Request q;
  q.type = type;
  q.req_id = req_id;
  q.part = r.part;
  q.offset = r.offset;
  q.length = r.length;
  q.stream = stream;
  q.flags = flags;
  q.body_len = body_len;
  std::string h(dp::kRequestSize, '\0');
  dp::EncodeRequest(q, reinterpret_cast<unsigned char*>(h.data()));
  return h;
}

// A fetch range: a file's or chunk's, a piece of one, or values at the edges of what arithmetic survives.
ByteRange PickRange(Input& in) {
  const Daemon& d = D();
  const uint8_t how = in.Byte() % 8;
  const ByteRange& known = d.ranges[in.Byte() % d.ranges.size()];
  const uint64_t lengths[] = {0, 1, 200, 4096, 1u << 20, 256u << 20, uint64_t{1} << 40, in.U64()};
  const uint64_t len = lengths[in.Byte() % 8];
  switch (how) {
    case 0: return known;
    case 1: {  // a piece of a known range
      uint64_t skip = in.Byte() % (known.length + 1);
      return {known.part, known.offset + skip, (known.length - skip) >> (in.Byte() % 4)};
    }
    case 2:  // wraps past 2^64 by a little: the request of the crash this target was written for
      return {known.part, 0 - len + in.Byte(), len};
    case 3: return {known.part, (uint64_t{1} << 62) - in.Byte(), len};
    case 4: {  // around the end of the partition
      uint64_t end = d.parts[known.part % d.parts.size()].size();
      return {known.part, end - (in.Byte() % 64), in.Byte()};
    }
    case 5: return {static_cast<uint32_t>(in.Byte()), known.offset, known.length};
    default: return {static_cast<uint32_t>(in.U64()), in.U64(), in.U64()};
  }
}

constexpr int kConns = 3;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  Conn conns[kConns];
  for (Conn& c : conns)
    if (!Open(&c).ok()) abort();
  uint64_t next_id = 1;
  for (int ops = 0; in.n > 0 && ops < 64; ++ops) {
    const uint8_t op = in.Byte();
    Conn* c = &conns[(op >> 4) % kConns];
    const uint64_t id = next_id++;
    switch (op % 8) {
      case 0:
      case 1: Send(conns, kConns, c, Header(dp::MsgType::kFetch, id, PickRange(in), 0, 0, 0)); break;
      case 2: {  // a raw header: magic and version kept or not, any type, any fields; our req_id
        std::string h = in.Bytes(dp::kRequestSize);
        h.resize(dp::kRequestSize, '\0');
        const uint8_t fix = in.Byte();
        if (fix & 1) format::Store32(h.data(), dp::kRequestMagic);
        if (fix & 2) {
          format::Store32(h.data() + 4, dp::kVersion | uint32_t{1u + fix / 4 % 4} << 16);  // version, then type
        }
        format::Store64(h.data() + 8, id);
        Send(conns, kConns, c, h);
        break;
      }
      case 3: {  // a hint: real and junk paths, its body length true or not
        std::string body;
        for (int k = in.Byte() % 8; k > 0; --k)
          body += (in.Byte() % 4 ? D().paths[in.Byte() % D().paths.size()] : in.Bytes(in.Byte() % 32)) + "\n";
        const uint8_t lie = in.Byte();
        const uint64_t body_len = lie % 4 == 0 ? body.size() + lie / 4 : lie % 4 == 1 ? in.U64() : body.size();
        const uint64_t stream = in.Byte();
        const uint32_t flags = in.Byte() & dp::kAppend;
        Send(conns, kConns, c, Header(dp::MsgType::kPrefetch, id, {}, stream, flags, body_len) + body);
        break;
      }
      case 4:
        Send(conns, kConns, c, Header(op & 8 ? dp::MsgType::kHello : dp::MsgType::kCacheMap, id, {}, 0, 0, 0));
        break;
      case 5: Send(conns, kConns, c, in.Bytes(in.Byte())); break;
      case 6:  // hang up, perhaps with a reply on its way, and come back
        c->Close();
        if (!Open(c).ok()) abort();
        break;
      default: break;
    }
    Settle(conns, kConns);
  }
  Settle(conns, kConns);
  for (Conn& c : conns) {
    // A connection that was not cut off and owes no hint body has every reply.
    if (c.fd >= 0 && !c.dropped && c.body_left == 0 && c.sent.empty() && !c.expect.empty())
      Finding("a request left unanswered");
    c.Close();
  }
  Settle(conns, 0);
  return 0;
}
