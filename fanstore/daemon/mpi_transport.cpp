// The daemon's MPI side; its messages, and what it does with a broken peer's, are in docs/daemon.md ("Daemon <->
// daemon"). A reply's tag names its fetch, so it is received straight into that fetch's memory; the owner sends big
// ranges straight from its mapping of the staged partition, small ones from a pooled buffer behind the header.
// Every MPI call here is nonblocking or completes at once (Mrecv only of a request of at most 32 bytes, which arrives
// whole): a receive from a peer killed mid-transfer is given up at its deadline instead of wedging the thread.
#include "mpi_transport.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "fanstore/protocol/daemon_wire.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "fanstore/protocol/payload_memfd.hpp"
#include "fanstore/protocol/range_check.hpp"
#include "log.hpp"
#include "peer_table.hpp"
#include "placement.hpp"

namespace fanstore::daemon {
namespace {

namespace dp = daemon_proto;
using format::Load32;
using format::Load64;
using format::Store32;
using format::Store64;

constexpr int kTagRequest = 0x4653;
constexpr int kTagReplyBase = 0x5000;
constexpr size_t kRequestBytes = 32;
constexpr size_t kReplyHeader = 32;
// kKindStaged: staging's request for a piece; answered from the staged copy only (StagedReader::kNotStagedYet
// while it is not there yet), never from the image directory. A zero-length one is a ping.
constexpr uint32_t kKindFetch = 0, kKindProbe = 1, kKindStaged = 2;
// Replies up to this size are received into scratch memory first (they are errors, probe answers, tiny files,
// or the header of a chunked reply); bigger ones straight into the fetch's memory.
constexpr int kSmallReply = 1024;
// What a reply may carry besides the range asked for: its header and an error message.
constexpr uint64_t kReplySlack = kReplyHeader + (64 << 10);
// Chunks held before their reply can take them (early_chunks), at most this many: beyond, the oldest are dropped
// (a peer sending chunks no header claims).
constexpr size_t kMaxEarlyChunks = 4096;
// The progress loop's hot window, less a margin for the message's time on the way and ours before we look at it.
constexpr int64_t kPeerHotUs = kHotWindowUs * 3 / 4;

std::string MpiError(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(len));
}

// Send buffers of the owner side: already faulted in, so serving a range costs a copy, not page faults.
class BufferPool {
 public:
  struct Buf {
    std::unique_ptr<char[]> mem;
    uint64_t cap = 0;
  };
  Buf Get(uint64_t n) {
    if (auto it = free_.lower_bound(n); it != free_.end()) {  // the smallest that fits
      Buf b{std::move(it->second), it->first};
      free_bytes_ -= b.cap;
      free_.erase(it);
      return b;
    }
    uint64_t cap = n < (64u << 10) ? (64u << 10) : (n + (1u << 20) - 1) & ~uint64_t((1u << 20) - 1);
    Buf b;
    b.mem.reset(new (std::nothrow) char[cap]);
    b.cap = b.mem ? cap : 0;
    return b;
  }
  void Put(Buf b) {
    if (!b.mem) return;
    // Keep what a burst needed, up to a bound; the biggest go first when over it.
    free_bytes_ += b.cap;
    free_.emplace(b.cap, std::move(b.mem));
    while (free_bytes_ > kKeepBytes) {
      free_bytes_ -= std::prev(free_.end())->first;
      free_.erase(std::prev(free_.end()));
    }
  }

 private:
  static constexpr uint64_t kKeepBytes = 256ull << 20;
  std::multimap<uint64_t, std::unique_ptr<char[]>> free_;  // by capacity
  uint64_t free_bytes_ = 0;
};

// A fetch this rank started.
struct Pending {
  uint64_t req_id = 0;
  ByteRange range;
  uint32_t kind = 0;
  FetchSink* sink = nullptr;
  std::vector<int> order;  // holders to try, in order
  size_t attempt = 0;
  int64_t final_deadline = 0;  // us
  int64_t attempt_start = 0;
  int64_t attempt_deadline = 0;
  uint64_t attempt_gen = 0;  // bumps per attempt: completions of an abandoned attempt are recognised
  bool awaiting = true;      // the current attempt's reply has not been probed yet
  // Set while sink memory is handed out for this attempt; AbandonLanding fills it with that memory's owner, which
  // the receive's callbacks keep until MPI completes them (never, for a receive from a dead peer).
  std::shared_ptr<std::shared_ptr<void>> keep;
  Status last;  // why the previous attempt failed
  int current() const { return order[attempt]; }
};

}  // namespace

struct MpiTransport::Impl {
  StagedReader* local;
  TransportOptions o;
  DaemonStats* stats;
  PeerTable peers;
  int reply_slots = 1;

  std::unordered_map<uint64_t, Pending> pending;
  std::vector<uint64_t> slot_req;  // reply slot -> req_id in flight there (0: free)
  uint64_t next_req = 1;
  int64_t next_deadline = INT64_MAX;
  bool shut = false;

  // Outstanding MPI requests and what to do when each completes (`ok`: MPI completed it without an error).
  std::vector<MPI_Request> active;
  std::vector<std::function<void(bool ok)>> on_complete;
  std::vector<int> done_idx;            // Reap's scratch
  std::vector<MPI_Status> done_status;  // Reap's scratch
  // Chunks carry their request's id in their tag (ChunkTag): of 2^31 tags under Open MPI, so a chunk is never taken
  // for another request's, whatever a broken peer sent before, and a reply slot is free once its fetch ends.
  uint64_t chunk_tags = 1;
  // A chunked reply being received: its chunks are taken one at a time (the next once the previous one's receive
  // completed, so the reply is whole when its last receive completes, whatever order MPI completes receives in).
  struct ChunkWait {
    uint64_t req_id = 0, gen = 0;
    char* dst = nullptr;  // null: received and dropped
    std::shared_ptr<std::shared_ptr<void>> keep;
    uint64_t off = 0, total = 0;
    uint32_t left = 0;       // chunk messages still to come
    bool busy = false;       // a receive of one of its chunks is in flight
    bool failed = false;     // broken: the rest of its chunks are dropped
    int64_t idle_since = 0;  // us: registered, or its last chunk received
  };
  using ChunkKey = std::pair<int, int>;  // chunk tag, source
  std::map<ChunkKey, std::deque<std::shared_ptr<ChunkWait>>> chunk_waits;
  int64_t next_wait_sweep = 0;
  // Chunks probed before they could be taken (their header not received yet, or the previous chunk still
  // arriving), in arrival order (MPI keeps the order of one source's messages with one tag).
  struct EarlyChunk {
    ChunkKey key;
    MPI_Message m;
    uint64_t count;
  };
  std::deque<EarlyChunk> early_chunks;
  BufferPool pool;

  Impl(StagedReader* l, TransportOptions opts, DaemonStats* s) : local(l), o(opts), stats(s), peers(opts.nranks) {
    void* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    const int tag_ub = flag ? *static_cast<int*>(ub) : 32767;
    reply_slots = std::clamp(tag_ub - kTagReplyBase + 1, 1, 1 << 20);
    if (o.reply_slots > 0) reply_slots = std::min(reply_slots, std::max(o.reply_slots, 2));
    slot_req.assign(static_cast<size_t>(reply_slots), 0);
    chunk_tags = static_cast<uint64_t>(tag_ub) + 1;
  }

  // A peer that sent us anything within kPeerHotUs is still in its loop's hot window (kHotWindowUs of polling after
  // activity): it sees the message without a datagram, which would cost both sides a syscall.
  void Ring(int rank) {
    if (o.doorbell && dp::NowUs() - peers.last_heard_us(rank) > kPeerHotUs) o.doorbell->Ring(rank);
  }

  void Track(MPI_Request r, std::function<void(bool ok)> f) {
    active.push_back(r);
    on_complete.push_back(std::move(f));
  }

  // Chunk messages of a payload of `n` bytes (this rank's cut: of max_message each, the last one shorter).
  uint32_t ChunksOf(uint64_t n) const { return static_cast<uint32_t>((n + o.max_message - 1) / o.max_message); }

  int SlotOf(uint64_t req_id) const { return static_cast<int>(req_id % static_cast<uint64_t>(reply_slots)); }
  int ChunkTag(uint64_t req_id) const { return static_cast<int>(req_id % chunk_tags); }

  // A request id whose slot (the reply's tag) no fetch in flight holds, or 0 when every slot is taken. Slot 0 is
  // the probes' (their answers carry req_id 0).
  uint64_t NewReqId() {
    for (int tried = 0; tried < reply_slots; ++tried) {
      uint64_t id = next_req++;
      int slot = SlotOf(id);
      if (slot != 0 && slot_req[static_cast<size_t>(slot)] == 0 && !ChunkTagBusy(ChunkTag(id))) return id;
    }
    return 0;
  }

  // A reply registered on chunk tag `tag` is still taking chunks: where MPI_TAG_UB is small (the standard's least is
  // 32767), a request 2^15 ids later would share its chunks' tag.
  bool ChunkTagBusy(int tag) const {
    auto w = chunk_waits.lower_bound({tag, std::numeric_limits<int>::min()});
    return w != chunk_waits.end() && w->first.first == tag;
  }

  // ---- asking side ------------------------------------------------------------------------------------------

  void Finish(uint64_t req_id, const Status& s, const char* data, uint64_t len) {
    auto it = pending.find(req_id);
    if (it == pending.end()) return;
    FetchSink* sink = it->second.sink;
    slot_req[static_cast<size_t>(SlotOf(req_id))] = 0;
    pending.erase(it);
    sink->Done(s, data, len);
  }

  // Gives up the current attempt's receive, if one is posted: its memory now belongs to the receive's callbacks.
  void AbandonLanding(Pending& p) {
    if (!p.keep) return;
    *p.keep = p.sink->Abandon();
    p.keep.reset();
  }

  // Lands the current attempt's reply of `n` bytes in the sink's memory (null: none).
  char* Land(Pending& p, uint64_t n) {
    char* dst = p.sink->Land(n);
    if (dst) p.keep = std::make_shared<std::shared_ptr<void>>();
    return dst;
  }

  void Send(int dest, int tag, const char* data, size_t n, std::function<void(bool ok)> done, Status* err,
            MPI_Comm comm = MPI_COMM_WORLD) {
    MPI_Request r;
    int rc = MPI_Isend(data, static_cast<int>(n), MPI_BYTE, dest, tag, comm, &r);
    if (rc != MPI_SUCCESS) {
      if (err) *err = Status(Code::kIoError, "MPI_Isend to rank " + std::to_string(dest) + " failed: " + MpiError(rc));
      done(false);
      return;
    }
    Track(r, std::move(done));
  }

  // Sends the next attempt of `req_id`, or finishes it with the last error when no holder is left.
  void NextAttempt(uint64_t req_id) {
    Pending& p = pending.at(req_id);
    int64_t now = dp::NowUs();
    while (p.attempt < p.order.size() && !peers.up(p.current())) {
      stats->fast_fails.fetch_add(1, std::memory_order_relaxed);
      p.last = Status(Code::kIoError, "rank " + std::to_string(p.current()) + " is not answering (down for " +
                                          std::to_string((now - peers.down_since_us(p.current())) / 1000) +
                                          " ms; probing it)");
      ++p.attempt;
    }
    if (p.attempt >= p.order.size() || now >= p.final_deadline) {
      Status why =
          !p.last.ok() ? p.last
          : p.attempt < p.order.size()
              ? Status(Code::kTimeout, "--timeout ran out before rank " + std::to_string(p.current()) + " was asked")
              : Status(Code::kIoError, "no other rank holds partition " + std::to_string(p.range.part));
      Finish(req_id, why, nullptr, 0);
      return;
    }
    if (p.attempt > 0) stats->failovers.fetch_add(1, std::memory_order_relaxed);
    // Split what is left of the budget over the holders still to try, so a silent first replica leaves
    // time for the next one.
    int64_t left = p.final_deadline - now;
    p.attempt_start = now;
    p.attempt_deadline = now + left / static_cast<int64_t>(p.order.size() - p.attempt);
    next_deadline = std::min(next_deadline, p.attempt_deadline);
    ++p.attempt_gen;
    p.awaiting = true;
    // A ping (staged-only, zero length: staging's liveness checks) is no fetch, as the owner does not count it either.
    if (p.kind != kKindStaged || p.range.length > 0) stats->peer_fetches.fetch_add(1, std::memory_order_relaxed);
    if (Status err = SendRequest(p.current(), req_id, p.kind, p.range); !err.ok()) Fail(req_id, err);
  }

  Status SendRequest(int dest, uint64_t req_id, uint32_t kind, const ByteRange& r) {
    auto buf = std::make_shared<std::array<char, kRequestBytes>>();
    Store64(buf->data(), req_id);
    Store32(buf->data() + 8, r.part);
    Store32(buf->data() + 12, kind);
    Store64(buf->data() + 16, r.offset);
    Store64(buf->data() + 24, r.length);
    Status err;
    Send(
        dest, kTagRequest, buf->data(), buf->size(), [buf](bool) {}, &err);
    if (err.ok()) Ring(dest);
    return err;
  }

  void Fail(uint64_t req_id, const Status& why) {
    auto it = pending.find(req_id);
    if (it == pending.end()) return;
    Pending& p = it->second;
    AbandonLanding(p);
    p.last = Status(why.code(), "rank " + std::to_string(p.current()) + ": " + why.message());
    ++p.attempt;
    NextAttempt(req_id);
  }

  void Fetch(const ByteRange& r, FetchSink* sink, std::vector<int> order, uint32_t kind) {
    if (shut) {
      sink->Done(Status(Code::kIoError, "daemon is shutting down"), nullptr, 0);
      return;
    }
    const uint64_t req_id = NewReqId();
    if (req_id == 0) {
      sink->Done(Status(Code::kIoError,
                        "no reply slot is free (" + std::to_string(pending.size()) + " fetches in flight); try again"),
                 nullptr, 0);
      return;
    }
    slot_req[static_cast<size_t>(SlotOf(req_id))] = req_id;
    Pending& p = pending[req_id];
    p.req_id = req_id;
    p.range = r;
    p.kind = kind;
    p.sink = sink;
    p.order = std::move(order);
    // 90% of the client's timeout: our "timeout" reply must reach the client before it gives up itself.
    p.final_deadline = dp::NowUs() + static_cast<int64_t>(o.timeout_ms) * 900;
    NextAttempt(req_id);
  }

  // Pending fetch a reply from `src` on `tag` belongs to, or null (a late answer from a replica given up on).
  Pending* Expecting(int src, int tag) {
    int slot = tag - kTagReplyBase;
    if (slot < 0 || slot >= reply_slots) return nullptr;
    uint64_t id = slot_req[static_cast<size_t>(slot)];
    auto it = pending.find(id);
    if (it == pending.end()) return nullptr;
    Pending& p = it->second;
    if (!p.awaiting || p.attempt >= p.order.size() || p.current() != src) return nullptr;
    return &p;
  }

  // A reply is waiting (probed as `m`, `count` bytes, from `src` on `tag`). Small replies and late answers are
  // received into scratch first (late ones then dropped, chunks and all); bigger ones straight into the fetch's memory.
  void OnReply(MPI_Message m, int src, int tag, int count) {
    Pending* p = Expecting(src, tag);
    const uint64_t n = static_cast<uint64_t>(count);
    std::shared_ptr<std::string> scratch;
    char* dst = nullptr;
    if (!p || count <= kSmallReply) {
      scratch = std::make_shared<std::string>(n, '\0');
      dst = scratch->data();
    } else if (n > kReplySlack + p->range.length) {
      // More than the range asked for (a broken peer): setting that much aside in the sink would make the fetch
      // cache evict for nothing, and a receive into less than the message corrupts the heap under Open MPI's
      // shared-memory transport. Dropped (chunks it may announce are held, then dropped, as nobody's).
      Drop(m, n);
      return Fail(p->req_id, Status(Code::kIoError, "malformed reply: " + std::to_string(count) + " bytes from rank " +
                                                        std::to_string(src) + " for " +
                                                        std::to_string(p->range.length) + " asked"));
    } else if (!(dst = Land(*p, n))) {
      Drop(m, n);  // must still be received
      return Fail(p->req_id, Status(Code::kNoMemory, "no memory for a " + std::to_string(count) + "-byte reply"));
    }
    uint64_t req_id = p ? p->req_id : 0, gen = p ? p->attempt_gen : 0;
    if (p) p->awaiting = false;
    Receive(m, dst, n, [this, req_id, gen, src, dst, n, scratch, keep = p ? p->keep : nullptr](bool ok) {
      if (!ok) return ReceiveFailed(req_id, gen, src);
      OnReplyMessage(req_id, gen, src, dst, n, !scratch);
    });
  }

  // Receives matched message `m` (`count` bytes) into `dst`; `done` runs when MPI completes it.
  void Receive(MPI_Message m, char* dst, uint64_t count, std::function<void(bool ok)> done) {
    MPI_Request r;
    MPI_Imrecv(dst, static_cast<int>(count), MPI_BYTE, &m, &r);
    Track(r, std::move(done));
  }

  // A receive of a reply from `src` completed with an error (a transport failure): its bytes are not to be looked
  // at. The fetch's attempt fails (the next holder is asked).
  void ReceiveFailed(uint64_t req_id, uint64_t gen, int src) {
    if (Current(req_id, gen))
      Fail(req_id, Status(Code::kIoError, "a reply from rank " + std::to_string(src) + " could not be received"));
  }

  Pending* Current(uint64_t req_id, uint64_t gen) {
    auto it = pending.find(req_id);
    if (it == pending.end() || it->second.attempt_gen != gen) return nullptr;
    return &it->second;
  }

  struct ReplyHead {
    uint64_t req_id;
    Code code;
    uint32_t msg_len;
    uint64_t n;
    uint32_t chunks;
  };
  static void StoreReplyHead(char* b, uint64_t req_id, Code code, uint32_t msg_len, uint64_t n, uint32_t chunks) {
    Store64(b, req_id);
    Store32(b + 8, static_cast<uint32_t>(code));
    Store32(b + 12, msg_len);
    Store64(b + 16, n);
    Store32(b + 24, chunks);
    Store32(b + 28, 0);
  }
  static bool ParseHead(const char* b, uint64_t count, ReplyHead* h) {
    if (count < kReplyHeader) return false;
    h->req_id = Load64(b);
    if (!dp::CodeFromWire(Load32(b + 8), &h->code)) return false;
    h->msg_len = Load32(b + 12);
    h->n = Load64(b + 16);
    h->chunks = Load32(b + 24);
    return RangeWithin(kReplyHeader, h->msg_len, count);
  }

  // A reply message received whole into `b` (`count` bytes): scratch, or (`landed`) the attempt's landed memory.
  void OnReplyMessage(uint64_t req_id, uint64_t gen, int src, const char* b, uint64_t count, bool landed) {
    Pending* p = Current(req_id, gen);
    ReplyHead h{};
    const bool well = ParseHead(b, count, &h);
    if (!p || !well || h.req_id != req_id || (landed && h.chunks)) {
      // Not the awaited answer (a late one, another request's, one given up on meanwhile, or a header too long for
      // scratch that announces chunks, which a good peer never sends): dropped, chunks and all. Chunks of a header
      // that cannot be read are held, then dropped, as nobody's.
      if (well && h.chunks) ReceiveChunks(src, h.req_id, h.n, h.chunks);
      if (!p) return;  // landed memory of an abandoned attempt is the graveyard's
      // Landed memory is spent; from scratch, the fetch keeps waiting for its own (a late answer sharing the tag).
      if (landed) return Fail(req_id, Status(Code::kIoError, "malformed reply"));
      p->awaiting = true;
      return;
    }
    std::string msg(b + kReplyHeader, h.msg_len);
    if (h.chunks) {
      // The payload follows in chunks, received in order into landed memory. Announced otherwise than asked for or
      // than this rank cuts: they are drained.
      const bool asked = h.code == Code::kOk && h.n == p->range.length && h.chunks == ChunksOf(h.n);
      char* dst = asked ? Land(*p, h.n) : nullptr;
      ReceiveChunks(src, req_id, h.n, h.chunks, p, dst);
      if (!asked)
        return Fail(req_id, h.code == Code::kOk ? Status(Code::kIoError, "malformed reply") : Status(h.code, msg));
      if (!dst) Fail(req_id, Status(Code::kNoMemory, "no memory for a " + std::to_string(h.n) + "-byte reply"));
      return;
    }
    if (h.code != Code::kOk) return Fail(req_id, Status(h.code, msg));
    const uint64_t off = kReplyHeader + h.msg_len;
    if (!RangeEndsAt(off, h.n, count) || h.n != p->range.length)
      return Fail(req_id, Status(Code::kIoError, "malformed reply"));
    if (landed) return Received(req_id, b + off, h.n);
    char* dst = Land(*p, h.n ? h.n : 1);
    if (!dst) return Fail(req_id, Status(Code::kNoMemory, "no memory for a reply"));
    std::memcpy(dst, b + off, h.n);
    Received(req_id, dst, h.n);
  }

  void Received(uint64_t req_id, const char* data, uint64_t n) {
    stats->bytes_received.fetch_add(n, std::memory_order_relaxed);
    Finish(req_id, Status::Ok(), data, n);
  }

  // Registers a reply to `req_id` whose header announced `chunks` (> 0) messages, `total` bytes, from `src` on the
  // chunk communicator (tag ChunkTag(req_id)): received in order into `dst`, the landed memory of `p`'s current
  // attempt, or (dst null) drained into scratch, counted by the header since the sender may cut otherwise than this
  // rank. Each chunk is taken by matched probe, so one of another size than due ends the reply before a byte of it
  // lands (docs/daemon.md). An attempt abandoned meanwhile keeps `keep` alive until its chunks are in.
  void ReceiveChunks(int src, uint64_t req_id, uint64_t total, uint32_t chunks, Pending* p = nullptr,
                     char* dst = nullptr) {
    auto w = std::make_shared<ChunkWait>();
    w->idle_since = dp::NowUs();
    if (dst) {
      w->req_id = p->req_id;
      w->gen = p->attempt_gen;
      w->dst = dst;
      w->keep = p->keep;
    }
    w->total = total;
    w->left = chunks;
    ChunkKey key{ChunkTag(req_id), src};
    chunk_waits[key].push_back(std::move(w));
    Feed(key);
  }

  // Matches each message waiting on `comm` in turn (no other receive can take it then) and hands it to `take`; true
  // if there was any. One over INT_MAX bytes (no `what` of ours is that big) is left matched and never received.
  template <class F>
  bool Drain(MPI_Comm comm, const char* what, F take) {
    bool any = false;
    MPI_Message m;
    MPI_Status st;
    for (int flag = 0; MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &m, &st) == MPI_SUCCESS && flag;) {
      any = true;
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      if (count < 0) Error("rank %d sent a %s too big to count; ignoring it", st.MPI_SOURCE, what);
      else take(m, st.MPI_SOURCE, st.MPI_TAG, count);
    }
    return any;
  }

  // Each chunk is held, then handed to the reply it belongs to (the first one registered from its source with its
  // tag) as soon as that reply can take it. Chunks nothing takes (a broken peer's) are dropped once over the bound.
  bool PollChunks() {
    if (o.chunk_comm == MPI_COMM_NULL) return false;
    return Drain(o.chunk_comm, "chunk", [this](MPI_Message m, int src, int tag, int count) {
      ChunkKey key{tag, src};
      early_chunks.push_back(EarlyChunk{key, m, static_cast<uint64_t>(count)});
      if (early_chunks.size() > kMaxEarlyChunks) {
        Drop(early_chunks.front().m, early_chunks.front().count);
        early_chunks.pop_front();
      }
      Feed(key);
    });
  }

  // Hands held chunks of `key` to its first reply while that reply has no receive in flight.
  void Feed(const ChunkKey& key) {
    for (;;) {
      auto wi = chunk_waits.find(key);
      if (wi == chunk_waits.end() || wi->second.front()->busy) return;
      auto ei = std::find_if(early_chunks.begin(), early_chunks.end(), [&](const auto& c) { return c.key == key; });
      if (ei == early_chunks.end()) return;
      std::shared_ptr<ChunkWait> w = wi->second.front();
      EarlyChunk c = *ei;
      early_chunks.erase(ei);
      TakeChunk(key, w, c.m, c.count);
    }
  }

  // Receives a matched message into scratch memory of its size and drops it; then runs `then` (may be null).
  void Drop(MPI_Message m, uint64_t count, std::function<void(bool)> then = nullptr) {
    auto scratch = std::make_shared<std::string>(static_cast<size_t>(count), '\0');
    Receive(m, scratch->data(), count, [scratch, then = std::move(then)](bool ok) {
      if (then) then(ok);
    });
  }

  // Chunk `m` (`count` bytes) for reply `w`, the first one waiting on `key`, which has no receive in flight.
  void TakeChunk(const ChunkKey& key, const std::shared_ptr<ChunkWait>& w, MPI_Message m, uint64_t count) {
    const int src = key.second;
    uint64_t due = w->off < w->total ? std::min(o.max_message, w->total - w->off) : 0;
    uint64_t off = w->off;
    w->off += due;
    --w->left;
    w->busy = true;  // before Fail, whose sink may start other fetches: this wait is taken
    if (w->dst && !w->failed && count != due) {
      // Not what this reply announced: it is over (the rest of its chunks are received and dropped).
      w->failed = true;
      if (Current(w->req_id, w->gen))
        Fail(w->req_id,
             Status(Code::kIoError, "rank " + std::to_string(src) + " sent a chunk of " + std::to_string(count) +
                                        " bytes where " + std::to_string(due) + " were due"));
    }
    auto done = [this, key, w](bool ok) {
      w->busy = false;
      w->idle_since = dp::NowUs();
      if (!ok && w->dst && !w->failed) {
        w->failed = true;
        ReceiveFailed(w->req_id, w->gen, key.second);
      }
      if (w->left == 0) {
        // The last chunk is in: this reply leaves the queue (it is its front: only the front takes chunks).
        if (auto wi = chunk_waits.find(key); wi != chunk_waits.end()) {
          wi->second.pop_front();
          if (wi->second.empty()) chunk_waits.erase(wi);
        }
        if (w->dst && !w->failed && Current(w->req_id, w->gen)) Received(w->req_id, w->dst, w->total);
      }
      Feed(key);
    };
    if (!w->dst || w->failed) return Drop(m, count, done);
    Receive(m, w->dst + off, count, done);
  }

  // Forgets replies whose chunks stopped coming for a whole fetch timeout (a peer killed or stopped between a
  // header and its chunks): the memory they would land in is released, and chunks that come later are held, then
  // dropped, as nobody's. A reply with a receive in flight stays: MPI owns its memory until it completes.
  void ForgetStalledReplies(int64_t now) {
    if (now < next_wait_sweep) return;
    next_wait_sweep = now + 100'000;
    const int64_t limit = static_cast<int64_t>(o.timeout_ms) * 1000;
    for (auto wi = chunk_waits.begin(); wi != chunk_waits.end();) {
      const ChunkWait& front = *wi->second.front();
      if (front.busy || now - front.idle_since < limit) {
        ++wi;
        continue;
      }
      for (const auto& w : wi->second) {
        if (w->dst && !w->failed && Current(w->req_id, w->gen))
          Fail(w->req_id, Status(Code::kTimeout,
                                 "rank " + std::to_string(wi->first.second) + " stopped sending a reply's chunks"));
      }
      wi = chunk_waits.erase(wi);
    }
  }

  void CheckDeadlines(int64_t now) {
    ForgetStalledReplies(now);
    if (now < next_deadline) return;
    next_deadline = INT64_MAX;
    std::vector<uint64_t> late;
    for (auto& [id, p] : pending) {
      if (now >= p.attempt_deadline) late.push_back(id);
      else next_deadline = std::min(next_deadline, p.attempt_deadline);
    }
    for (uint64_t id : late) {
      auto it = pending.find(id);
      if (it == pending.end()) continue;
      Pending& p = it->second;
      if (now < p.attempt_deadline) continue;
      int r = p.current();
      int64_t waited = (now - p.attempt_start) / 1000;
      stats->timeouts.fetch_add(1, std::memory_order_relaxed);
      bool went_down = peers.TimedOut(r, p.attempt_start, now);
      Fail(id, Status(Code::kTimeout, "no answer within " + std::to_string(waited) + " ms (daemon stopped or dead?)"));
      if (went_down) PeerDown(r, waited);
    }
  }

  // `r` let a request time out without a word: from now on its reads fail over (or fail) at once.
  void PeerDown(int r, int64_t waited_ms) {
    stats->peers_down.fetch_add(1, std::memory_order_relaxed);
    Error(
        "rank %d did not answer within %lld ms: treating it as down (its partitions are read from the other "
        "replicas or the image directory) until it answers again",
        r, static_cast<long long>(waited_ms));
    std::vector<uint64_t> waiting;
    for (auto& [id, p] : pending)
      if (p.attempt < p.order.size() && p.current() == r) waiting.push_back(id);
    for (uint64_t id : waiting) {
      stats->fast_fails.fetch_add(1, std::memory_order_relaxed);
      Fail(id, Status(Code::kTimeout, "gave up: rank " + std::to_string(r) + " stopped answering"));
    }
  }

  void ProbeDownPeers() {
    for (int r = 0; r < o.nranks; ++r) {
      if (r == o.rank || !peers.TakeProbe(r)) continue;
      // One probe per down event: a stopped peer answers it when it runs again; a dead one never does, and
      // nothing more is ever queued towards it.
      (void)SendRequest(r, 0, kKindProbe, ByteRange{});
    }
  }

  // ---- owner side -------------------------------------------------------------------------------------------

  // A peer asks for a range of ours (or probes us): read it behind the reply header and send (errors are
  // replied, never dropped). `asked_us`: when the request came (0: now; it waited for its piece since).
  void ServePeer(int src, const char* req, int count, int64_t asked_us = 0) {
    const bool waited = asked_us != 0;
    if (!waited) asked_us = dp::NowUs();
    uint64_t req_id = count >= static_cast<int>(kRequestBytes) ? Load64(req) : 0;
    uint32_t part = Load32(req + 8), kind = Load32(req + 12);
    uint64_t off = Load64(req + 16), len = Load64(req + 24);
    Status s;
    if (count != static_cast<int>(kRequestBytes)) s = Status(Code::kInvalidArgument, "malformed request");
    else if (kind == kKindProbe) len = 0;
    else if (kind != kKindFetch && kind != kKindStaged) s = Status(Code::kInvalidArgument, "unknown request kind");
    else if (kind == kKindStaged && len == 0) s = Status::Ok();  // a ping: alive
    else s = local->Check(part, off, len);
    // A range this rank stages next and has not yet: the reply waits for it (StagedReader::Await) rather than
    // read the image directory a second time.
    if (s.ok() && kind == kKindFetch && !waited) {
      std::array<char, kRequestBytes> copy;
      std::memcpy(copy.data(), req, kRequestBytes);
      if (local->Await(part, off, len,
                       [this, src, copy, asked_us] { ServePeer(src, copy.data(), kRequestBytes, asked_us); }))
        return;
    }
    if (kind == kKindFetch || (kind == kKindStaged && len > 0))
      stats->peer_requests.fetch_add(1, std::memory_order_relaxed);
    uint64_t n = s.ok() ? len : 0;
    const bool staged = local->Staged(part, off, n);
    if (o.maps && n >= o.mapped_send_min && staged) {
      if (const char* mapped = o.maps->Pin(part, off, n))
        return SendMapped(src, kTagReplyBase + SlotOf(req_id), req_id, part, mapped, n);
    }
    if (s.ok() && kind == kKindFetch && n > 0 && o.image_dir && !staged) {
      // Not staged here yet: from the image directory, off this thread (a slow shared file system must not stall
      // this daemon), answered (bytes or a timeout) before the asker gives up on this rank: it gives each of the
      // holders it may ask an equal share of 90% of --timeout.
      const size_t holders = std::max<size_t>(
          1, ReadOrder(RangeKey(part, off), part, o.replicated_part, o.nranks, o.replicas, src).size());
      const int64_t share = static_cast<int64_t>(o.timeout_ms) * 900 / static_cast<int64_t>(holders);
      o.image_dir->Read(part, off, n, asked_us + share * 9 / 10,
                        [this, src, req_id](const Status& rs, const char* data, uint64_t got) {
                          SendReply(src, req_id, rs, got, [&](char* dst) {
                            std::memcpy(dst, data, got);
                            return Status::Ok();
                          });
                        });
      return;
    }
    SendReply(src, req_id, s, n, [&](char* dst) { return local->Read(part, off, n, dst, kind == kKindStaged); });
  }

  // Replies to `src`'s request `req_id` with `s`, and when it is ok, the `n` bytes `fill` puts behind the header
  // (or the error it returns instead).
  void SendReply(int src, uint64_t req_id, Status s, uint64_t n, const std::function<Status(char*)>& fill) {
    const int tag = kTagReplyBase + SlotOf(req_id);
    if (!s.ok()) n = 0;
    // An error's message takes the payload's place behind the header.
    std::string msg;
    auto error = [&](Status e) {
      s = std::move(e);
      msg = s.message().substr(0, dp::kMaxReplyMessage);
      n = 0;
    };
    if (!s.ok()) error(s);
    auto buf = std::make_shared<BufferPool::Buf>(pool.Get(kReplyHeader + msg.size() + n));
    if (!buf->mem) {
      error(Status(Code::kNoMemory, "owner out of memory for a " + std::to_string(n) + "-byte range"));
      *buf = pool.Get(kReplyHeader + msg.size());
      if (!buf->mem) return;  // the asker times out and fails over
    }
    char* b = buf->mem.get();
    if (n > 0) {
      if (Status rs = fill(b + kReplyHeader); !rs.ok()) error(rs);
    }
    const uint32_t chunks = n + kReplyHeader + msg.size() > o.max_message ? ChunksOf(n) : 0;
    StoreReplyHead(b, req_id, s.code(), static_cast<uint32_t>(msg.size()), n, chunks);
    std::memcpy(b + kReplyHeader, msg.data(), msg.size());
    // The buffer goes back to the pool when every send of it completed (never, if the asker died meanwhile).
    auto sends = std::make_shared<int>(1 + static_cast<int>(chunks));
    auto release = [this, buf, sends](bool) {
      if (--*sends == 0) pool.Put(std::move(*buf));
    };
    Status err;
    Send(src, tag, b, kReplyHeader + msg.size() + (chunks ? 0 : n), release, &err);
    SendChunks(src, ChunkTag(req_id), b + kReplyHeader, n, chunks, release, &err);
    stats->bytes_sent.fetch_add(n, std::memory_order_relaxed);
    Ring(src);
  }

  // Replies `n` bytes at `mapped` (pinned in partition `part`'s mapping): the header alone, then the payload in
  // chunks straight from the mapping. Unpinned once every send completed (never, if the asker died meanwhile: a
  // writer of that partition then waits for the kernel's lease-break time).
  void SendMapped(int src, int tag, uint64_t req_id, uint32_t part, const char* mapped, uint64_t n) {
    auto head = std::make_shared<std::array<char, kReplyHeader>>();
    const uint32_t chunks = ChunksOf(n);
    StoreReplyHead(head->data(), req_id, Code::kOk, 0, n, chunks);
    auto sends = std::make_shared<int>(1 + static_cast<int>(chunks));
    auto release = [this, head, sends, part](bool) {
      if (--*sends == 0) o.maps->Unpin(part);
    };
    Status err;
    Send(src, tag, head->data(), kReplyHeader, release, &err);
    if (!err.ok()) {  // the asker is gone
      for (uint32_t c = 0; c < chunks; ++c) release(false);
      return;
    }
    // A chunk MPI could not send from the mapping (some transports cannot: RDMA registration of read-only file
    // pages can fail), to a peer not known to be down (a send to a dead peer says nothing about the mapping): from
    // now on every range is read into a send buffer; the asker waits out this attempt and asks again.
    auto chunk_done = [this, release, src](bool ok) {
      if (!ok && peers.up(src))
        MappedSendFailed("a send from a partition's mapping to rank " + std::to_string(src) + " failed");
      release(ok);
    };
    SendChunks(src, ChunkTag(req_id), mapped, n, chunks, chunk_done, &err);
    if (!err.ok()) return MappedSendFailed(err.message());
    stats->mapped_sends.fetch_add(1, std::memory_order_relaxed);
    stats->bytes_sent.fetch_add(n, std::memory_order_relaxed);
    Ring(src);
  }

  // Posts `chunks` messages of the `n` bytes at `payload` on the chunk communicator, `done` for each; none after a
  // send that failed to start (`*err`, the header's included: its asker is gone), whose `done(false)` runs at once.
  void SendChunks(int src, int tag, const char* payload, uint64_t n, uint32_t chunks,
                  const std::function<void(bool)>& done, Status* err) {
    for (uint64_t c = 0, at = 0; c < chunks; ++c, at += o.max_message) {
      if (!err->ok()) done(false);
      else Send(src, tag, payload + at, std::min(o.max_message, n - at), done, err, o.chunk_comm);
    }
  }

  void MappedSendFailed(const std::string& why) {
    if (o.maps->mapped() == 0) return;  // off already: said once
    Error("%s while sending from a partition's mapping; sending every range by pread from now on", why.c_str());
    o.maps->TurnOff();
  }

  // ---- progress ---------------------------------------------------------------------------------------------

  // Takes every message that has arrived on the world communicator; true if there was any.
  bool PollIncoming() {
    return Drain(MPI_COMM_WORLD, "message", [this](MPI_Message m, int src, int tag, int count) {
      if (peers.Heard(src, dp::NowUs())) Info("rank %d answers again: reading from it again", src);
      if (tag == kTagRequest) {
        // At most 32 bytes: complete on arrival (eager), so this Mrecv returns at once. A longer one is received
        // without waiting for it, dropped and answered as malformed.
        char req[kRequestBytes] = {};
        if (count > static_cast<int>(kRequestBytes)) Drop(m, static_cast<uint64_t>(count));
        else MPI_Mrecv(req, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
        ServePeer(src, req, count);
      } else if (tag >= kTagReplyBase) {
        OnReply(m, src, tag, count);
      } else {
        // Not ours (chunks travel on the chunk communicator, probed apart): received and dropped, not left queued.
        Drop(m, static_cast<uint64_t>(count));
      }
    });
  }

  // Completes finished sends/receives (running their callbacks); true if any completed.
  bool Reap() {
    if (active.empty()) return false;
    int outcount = 0;
    done_idx.resize(active.size());
    done_status.resize(active.size());
    int rc =
        MPI_Testsome(static_cast<int>(active.size()), active.data(), &outcount, done_idx.data(), done_status.data());
    if (outcount == MPI_UNDEFINED || outcount <= 0) return false;
    // A status says anything only when Testsome says to look (MPI_ERR_IN_STATUS); any other error: all failed.
    std::vector<std::pair<std::function<void(bool)>, bool>> done;
    done.reserve(static_cast<size_t>(outcount));
    for (int i = 0; i < outcount; ++i) {
      const MPI_Status& st = done_status[static_cast<size_t>(i)];
      bool ok = rc == MPI_SUCCESS || (rc == MPI_ERR_IN_STATUS && st.MPI_ERROR == MPI_SUCCESS);
      done.emplace_back(std::move(on_complete[static_cast<size_t>(done_idx[static_cast<size_t>(i)])]), ok);
    }
    // Completed handles are MPI_REQUEST_NULL now; compact both arrays.
    size_t w = 0;
    for (size_t r = 0; r < active.size(); ++r) {
      if (active[r] == MPI_REQUEST_NULL) continue;
      active[w] = active[r];
      on_complete[w] = std::move(on_complete[r]);
      ++w;
    }
    active.resize(w);
    on_complete.resize(w);
    // Callbacks may post new transfers (Track), so they run after the arrays are consistent again.
    for (auto& [f, ok] : done) f(ok);
    return true;
  }

  bool Progress() {
    if (shut) return false;
    if (o.doorbell) o.doorbell->Flush();  // for the fetches started since the last step (clients, prefetch)
    if (o.maps) o.maps->CheckLeases();
    bool did = PollIncoming();
    did |= Reap();
    did |= PollChunks();
    CheckDeadlines(dp::NowUs());
    ProbeDownPeers();
    if (o.doorbell) o.doorbell->Flush();
    return did;
  }

  void Shutdown() {
    if (shut) return;
    shut = true;  // first: a sink that fetches again from Done is refused
    while (!pending.empty()) {
      Pending& p = pending.begin()->second;
      AbandonLanding(p);
      Finish(p.req_id, Status(Code::kIoError, "daemon is shutting down"), nullptr, 0);
    }
  }

  ~Impl() {
    Shutdown();
    // Requests still in flight (sends to vanished peers, abandoned receives) stay MPI's until MPI_Finalize: the
    // memory their callbacks own must outlive this object, so it is left allocated on purpose.
    if (!on_complete.empty()) new std::vector<std::function<void(bool)>>(std::move(on_complete));
  }
};

MpiTransport::MpiTransport(StagedReader* local, TransportOptions opts, DaemonStats* stats)
    : impl_(std::make_unique<Impl>(local, opts, stats)) {}

MpiTransport::~MpiTransport() = default;

void MpiTransport::Fetch(const ByteRange& r, FetchSink* sink) {
  const TransportOptions& o = impl_->o;
  impl_->Fetch(r, sink, ReadOrder(RangeKey(r.part, r.offset), r.part, o.replicated_part, o.nranks, o.replicas, o.rank),
               kKindFetch);
}

void MpiTransport::FetchFrom(int rank, const ByteRange& r, bool staged_only, FetchSink* sink) {
  impl_->Fetch(r, sink, {rank}, staged_only ? kKindStaged : kKindFetch);
}

bool MpiTransport::Progress() { return impl_->Progress(); }

bool MpiTransport::Awaiting(int64_t* oldest_us) const {
  if (impl_->pending.empty()) return false;
  *oldest_us = INT64_MAX;
  for (auto& [id, p] : impl_->pending) *oldest_us = std::min(*oldest_us, p.attempt_start);
  return true;
}

void MpiTransport::Shutdown() { impl_->Shutdown(); }

}  // namespace fanstore::daemon
