// The daemon's MPI side. Its messages (request, reply, chunks) are laid out in docs/daemon.md, "Daemon <-> daemon";
// all on MPI_COMM_WORLD but for the chunks, which travel on their own communicator.
// The reply tag carries the request's slot, so the asker knows which fetch a reply is for from the probe alone and
// receives it straight into that fetch's memory (the client's reply area): no copy in the asking daemon. The owner
// sends a range of mapped_send_min bytes or more straight from its mapping of the staged partition (PartitionMaps),
// as a header and then the payload as chunks (chunks >= 1 however small): no copy in the owner either. Smaller
// ranges it reads into a pooled, already-faulted send buffer behind the header (one copy, from the page cache),
// which costs less than a second message.
// Every MPI call here is nonblocking or completes at once (Improbe, Imrecv, Isend, Testsome; Mrecv only of a
// request of at most 32 bytes, which arrives whole): a receive from a peer killed mid-transfer (Open MPI's
// shared-memory single copy then fails with "Read -1, expected N, errno = 3" and the receive never completes) is given
// up at its deadline instead of wedging the thread.
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
#include <unordered_set>
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
// Chunks probed before their reply could take them (its header not received yet, or its previous chunk still
// arriving), kept as matched messages at most this many; beyond, the oldest are received and dropped (a peer
// sending chunks no header claims).
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
  // Set while sink memory is handed out for this attempt; AbandonLanding fills it with the owner of that memory.
  // The receive's completion callbacks hold the slot, so the memory is freed when MPI completes them (never, for a
  // receive from a dead peer).
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
  // Reply slots whose traffic can no longer be told apart (a reply that broke the protocol, a receive that failed):
  // no later fetch uses them (their tags).
  std::unordered_set<int> poisoned;
  // A chunked reply being received: its chunks are taken one at a time (the next once the previous one's receive
  // completed, so the reply is whole when its last receive completes, whatever order MPI completes receives in).
  struct ChunkWait {
    uint64_t req_id = 0, gen = 0;
    char* dst = nullptr;  // null: received and dropped
    std::shared_ptr<std::shared_ptr<void>> keep;
    uint64_t off = 0, total = 0;
    uint32_t left = 0;    // chunk messages still to come
    bool busy = false;    // a receive of one of its chunks is in flight
    bool failed = false;  // broken: the rest of its chunks are dropped
  };
  using ChunkKey = std::pair<int, int>;  // tag, source: a slot's replies are neighbours in chunk_waits
  std::map<ChunkKey, std::deque<std::shared_ptr<ChunkWait>>> chunk_waits;
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
  }

  // A peer that sent us anything within kPeerHotUs is still in its loop's hot window (kHotWindowUs of polling after
  // activity): it sees the message without a datagram, which would cost both sides a syscall.
  void Ring(int rank) {
    if (o.doorbell && dp::NowUs() - peers.last_heard_us(rank) > kPeerHotUs) o.doorbell->Ring(rank);
  }
  void FlushDoorbell() {
    if (o.doorbell) o.doorbell->Flush();
  }

  void Track(MPI_Request r, std::function<void(bool ok)> f) {
    active.push_back(r);
    on_complete.push_back(std::move(f));
  }

  // Chunk messages of a payload of `n` bytes (this rank's cut: of max_message each, the last one shorter).
  uint32_t ChunksOf(uint64_t n) const { return static_cast<uint32_t>((n + o.max_message - 1) / o.max_message); }

  int SlotOf(uint64_t req_id) const { return static_cast<int>(req_id % static_cast<uint64_t>(reply_slots)); }

  // A chunked reply is registered or a chunk held on `slot`: what arrives on it must not be taken for a new fetch's.
  bool SlotBusy(int slot) const {
    const int tag = kTagReplyBase + slot;
    // One look-up per fetch; the held chunks are a few outside a broken peer's traffic.
    auto w = chunk_waits.lower_bound({tag, std::numeric_limits<int>::min()});
    return (w != chunk_waits.end() && w->first.first == tag) ||
           std::any_of(early_chunks.begin(), early_chunks.end(), [tag](const auto& c) { return c.key.first == tag; });
  }

  // A request id whose slot (the reply's tag) nothing waits on, or 0 when every slot is taken. Slot 0 is the
  // probes' (their answers carry req_id 0).
  uint64_t NewReqId() {
    for (int pass = 0; pass < 2; ++pass) {
      for (int tried = 0; tried < reply_slots; ++tried) {
        uint64_t id = next_req++;
        int slot = SlotOf(id);
        if (slot != 0 && !poisoned.count(slot) && slot_req[static_cast<size_t>(slot)] == 0 && !SlotBusy(slot))
          return id;
      }
      if (poisoned.empty()) break;
      // Every slot busy or lost: take the lost ones back (only a peer breaking the protocol over and over gets here).
      Error("every reply slot is in use or was lost to a peer breaking the protocol; reusing the lost ones");
      poisoned.clear();
    }
    return 0;
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
      Status why = p.last.ok() ? Status(Code::kIoError, "no other rank holds partition " + std::to_string(p.range.part))
                               : p.last;
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
    stats->peer_fetches.fetch_add(1, std::memory_order_relaxed);
    Status err;
    SendRequest(p.current(), req_id, p.kind, p.range, &err);
    if (!err.ok()) return Fail(req_id, err);
  }

  void SendRequest(int dest, uint64_t req_id, uint32_t kind, const ByteRange& r, Status* err) {
    auto buf = std::make_shared<std::array<char, kRequestBytes>>();
    Store64(buf->data(), req_id);
    Store32(buf->data() + 8, r.part);
    Store32(buf->data() + 12, kind);
    Store64(buf->data() + 16, r.offset);
    Store64(buf->data() + 24, r.length);
    Status failed;
    Send(
        dest, kTagRequest, buf->data(), buf->size(), [buf](bool) {}, &failed);
    if (failed.ok()) Ring(dest);
    if (err) *err = failed;
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
    Pending p;
    p.req_id = req_id;
    p.range = r;
    p.kind = kind;
    p.sink = sink;
    p.order = std::move(order);
    // 90% of the client's timeout: our "timeout" reply must reach the client before it gives up itself.
    p.final_deadline = dp::NowUs() + static_cast<int64_t>(o.timeout_ms) * 900;
    slot_req[static_cast<size_t>(SlotOf(req_id))] = req_id;
    pending.emplace(req_id, std::move(p));
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

  // A reply is waiting (probed as `m`, `count` bytes, from `src` on `tag`).
  void OnReply(MPI_Message m, int src, int tag, int count) {
    Pending* p = Expecting(src, tag);
    if (!p || count <= kSmallReply) {
      // Scratch first: small replies, and late answers (dropped once received; their chunks too).
      auto scratch = std::make_shared<std::string>(static_cast<size_t>(count), '\0');
      uint64_t req_id = p ? p->req_id : 0, gen = p ? p->attempt_gen : 0;
      if (p) p->awaiting = false;
      Receive(m, scratch->data(), static_cast<uint64_t>(count), [this, scratch, req_id, gen, src, tag](bool ok) {
        if (!ok) return ReceiveFailed(req_id, gen, tag, src);
        OnScratchReply(req_id, gen, src, tag, *scratch);
      });
      return;
    }
    if (static_cast<uint64_t>(count) > kReplySlack + p->range.length) {
      // More than the range asked for (a broken or hostile peer): setting that much aside in the sink would make
      // the fetch cache evict for nothing. Received into scratch and dropped instead (a receive into less than
      // the message, truncated, corrupted the heap under Open MPI 4.1's shared-memory transport); chunks it may
      // announce cannot be told apart, so its slot is not used again.
      Drop(m, static_cast<uint64_t>(count), nullptr);
      Poison(tag);
      return Fail(p->req_id, Status(Code::kIoError, "malformed reply: " + std::to_string(count) + " bytes from rank " +
                                                        std::to_string(src) + " for " +
                                                        std::to_string(p->range.length) + " asked"));
    }
    char* dst = Land(*p, static_cast<uint64_t>(count));
    if (!dst) {
      // Must still be received; then the fetch fails.
      Drop(m, static_cast<uint64_t>(count), nullptr);
      Fail(p->req_id, Status(Code::kNoMemory, "no memory for a " + std::to_string(count) + "-byte reply"));
      return;
    }
    p->awaiting = false;
    uint64_t req_id = p->req_id, gen = p->attempt_gen;
    Receive(m, dst, static_cast<uint64_t>(count), [this, req_id, gen, dst, count, src, tag, keep = p->keep](bool ok) {
      if (!ok) return ReceiveFailed(req_id, gen, tag, src);
      OnLandedReply(req_id, gen, src, tag, dst, static_cast<uint64_t>(count));
    });
  }

  // Receives matched message `m` (`count` bytes) into `dst`; `done` runs when MPI completes it.
  void Receive(MPI_Message m, char* dst, uint64_t count, std::function<void(bool ok)> done) {
    MPI_Request r;
    MPI_Imrecv(dst, static_cast<int>(count), MPI_BYTE, &m, &r);
    Track(r, std::move(done));
  }

  // No later fetch uses `tag`'s slot. Bounded: should half the slots ever be lost this way, they are taken back.
  void Poison(int tag) {
    int slot = tag - kTagReplyBase;
    if (slot <= 0 || slot >= reply_slots) return;
    if (poisoned.size() >= static_cast<size_t>(reply_slots) / 2) poisoned.clear();
    poisoned.insert(slot);
  }

  // A receive of a reply on `tag` from `src` completed with an error (a transport failure): its bytes are not to
  // be looked at. The fetch's attempt fails (the next holder is asked), and the slot is poisoned: chunks of that
  // reply may still be on their way.
  void ReceiveFailed(uint64_t req_id, uint64_t gen, int tag, int src) {
    Poison(tag);
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

  void OnScratchReply(uint64_t req_id, uint64_t gen, int src, int tag, const std::string& b) {
    ReplyHead h{};
    bool well = ParseHead(b.data(), b.size(), &h);
    Pending* p = Current(req_id, gen);
    if (!p || !well || h.req_id != req_id) {
      // Not the awaited answer (a late one sharing the tag, a probe answer): dropped, chunks and all; the
      // fetch keeps waiting for its own. A header that cannot be read may have chunks we cannot count: its slot
      // is not used again.
      if (!well) Poison(tag);
      if (well && h.chunks) ReceiveChunks(src, tag, h.n, h.chunks);
      if (p) p->awaiting = true;
      return;
    }
    std::string msg(b.data() + kReplyHeader, h.msg_len);
    if (h.chunks) {
      // The payload follows in chunks: land it, then receive them in order.
      Status rs = h.code == Code::kOk ? Status::Ok() : Status(h.code, msg);
      if (!rs.ok() || h.n != p->range.length || h.chunks != ChunksOf(h.n)) {
        // Not what was asked for, or cut otherwise than this rank cuts: the chunks announced are dropped, and the
        // slot is not used again (what else this peer sends on it cannot be told apart).
        Poison(tag);
        ReceiveChunks(src, tag, h.n, h.chunks);
        return Fail(req_id, rs.ok() ? Status(Code::kIoError, "malformed reply") : rs);
      }
      char* dst = Land(*p, h.n);
      if (!dst) {
        ReceiveChunks(src, tag, h.n, h.chunks);
        return Fail(req_id, Status(Code::kNoMemory, "no memory for a " + std::to_string(h.n) + "-byte reply"));
      }
      ReceiveChunks(src, tag, h.n, h.chunks, p, dst);
      return;
    }
    if (h.code != Code::kOk) return Fail(req_id, Status(h.code, msg));
    uint64_t off = kReplyHeader + h.msg_len;
    if (!RangeEndsAt(off, h.n, b.size()) || h.n != p->range.length)
      return Fail(req_id, Status(Code::kIoError, "malformed reply"));
    char* dst = Land(*p, h.n ? h.n : 1);
    if (!dst) return Fail(req_id, Status(Code::kNoMemory, "no memory for a reply"));
    std::memcpy(dst, b.data() + off, h.n);
    Received(req_id, dst, h.n);
  }

  void OnLandedReply(uint64_t req_id, uint64_t gen, int src, int tag, const char* dst, uint64_t count) {
    Pending* p = Current(req_id, gen);
    if (!p) return;  // abandoned meanwhile; its memory is the graveyard's
    ReplyHead h{};
    const bool well = ParseHead(dst, count, &h);
    if (!well || h.req_id != req_id || h.chunks) {
      // As in OnScratchReply: chunks a header may announce (or that one unreadable may have) cannot be told from
      // a later fetch's, so its slot goes; a late answer of another fetch costs only this attempt.
      if (!well || h.chunks) Poison(tag);
      if (well && h.chunks) ReceiveChunks(src, tag, h.n, h.chunks);
      return Fail(req_id, Status(Code::kIoError, "malformed reply"));
    }
    if (h.code != Code::kOk) return Fail(req_id, Status(h.code, std::string(dst + kReplyHeader, h.msg_len)));
    uint64_t off = kReplyHeader + h.msg_len;
    if (!RangeEndsAt(off, h.n, count) || h.n != p->range.length)
      return Fail(req_id, Status(Code::kIoError, "malformed reply"));
    Received(req_id, dst + off, h.n);
  }

  void Received(uint64_t req_id, const char* data, uint64_t n) {
    stats->bytes_received.fetch_add(n, std::memory_order_relaxed);
    Finish(req_id, Status::Ok(), data, n);
  }

  // Registers a reply whose header announced `chunks` (> 0) messages of payload, `total` bytes, from `src` on the
  // chunk communicator with the reply's `tag`: they are received in order into `dst` (the landed memory of the
  // current attempt of `p`), or (p null: a reply nobody waits for) into scratch memory that is dropped, counted by
  // the header since its sender may cut otherwise than this rank does. PollChunks takes each chunk by matched probe,
  // so its size is known before a byte of it lands: one of another size than due ends the reply instead of being
  // received into memory too small for it (Open MPI's shared-memory single copy writes past the end of a receive
  // buffer smaller than the message: docs/daemon.md). An attempt abandoned meanwhile keeps receiving into its
  // memory (kept alive by `keep`): its chunks must not be taken for a later reply's.
  void ReceiveChunks(int src, int tag, uint64_t total, uint32_t chunks, Pending* p = nullptr, char* dst = nullptr) {
    auto w = std::make_shared<ChunkWait>();
    if (p) {
      w->req_id = p->req_id;
      w->gen = p->attempt_gen;
      w->dst = dst;
      w->keep = p->keep;
    }
    w->total = total;
    w->left = chunks;
    ChunkKey key{tag, src};
    chunk_waits[key].push_back(std::move(w));
    Feed(key);
  }

  // Matches the next message waiting on `comm` (no other receive can take it then); false when none is. *count is
  // its size, or -1 for one over INT_MAX bytes (MPI_UNDEFINED): no `what` of ours is that big, so it is left
  // matched and never received, with a line.
  bool ProbeNext(MPI_Comm comm, const char* what, MPI_Message* m, MPI_Status* st, int* count) {
    int flag = 0;
    if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, m, st) != MPI_SUCCESS || !flag) return false;
    *count = 0;
    MPI_Get_count(st, MPI_BYTE, count);
    if (*count < 0) {
      Error("rank %d sent a %s too big to count; ignoring it", st->MPI_SOURCE, what);
      *count = -1;
    }
    return true;
  }

  // Probes the chunk communicator: each chunk is held, then handed to the reply it belongs to (the first one
  // registered from its source with its tag) as soon as that reply can take it.
  bool PollChunks() {
    if (o.chunk_comm == MPI_COMM_NULL) return false;
    bool any = false;
    MPI_Message m;
    MPI_Status st;
    int count = 0;
    while (ProbeNext(o.chunk_comm, "chunk", &m, &st, &count)) {
      any = true;
      if (count < 0) continue;
      ChunkKey key{st.MPI_TAG, st.MPI_SOURCE};
      early_chunks.push_back(EarlyChunk{key, m, static_cast<uint64_t>(count)});
      // Bounded: chunks nothing takes (a broken or hostile peer) are received and dropped, oldest first.
      if (early_chunks.size() > kMaxEarlyChunks) {
        Drop(early_chunks.front().m, early_chunks.front().count, nullptr);
        early_chunks.pop_front();
      }
      Feed(key);
    }
    return any;
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
  void Drop(MPI_Message m, uint64_t count, std::function<void(bool)> then) {
    auto scratch = std::make_shared<std::string>(static_cast<size_t>(count), '\0');
    Receive(m, scratch->data(), count, [scratch, then = std::move(then)](bool ok) {
      if (then) then(ok);
    });
  }

  // Chunk `m` (`count` bytes) for reply `w`, the first one waiting on `key`, which has no receive in flight.
  void TakeChunk(const ChunkKey& key, const std::shared_ptr<ChunkWait>& w, MPI_Message m, uint64_t count) {
    auto [tag, src] = key;
    uint64_t due = w->off < w->total ? std::min(o.max_message, w->total - w->off) : 0;
    if (w->dst && !w->failed && count != due) {
      // Not what this reply announced: it is over (the rest of its chunks are received and dropped), and its slot
      // is not used again, since what else this peer sends on it cannot be told apart.
      w->failed = true;
      Poison(tag);
      if (Current(w->req_id, w->gen))
        Fail(w->req_id,
             Status(Code::kIoError, "rank " + std::to_string(src) + " sent a chunk of " + std::to_string(count) +
                                        " bytes where " + std::to_string(due) + " were due"));
    }
    uint64_t off = w->off;
    w->off += due;
    --w->left;
    w->busy = true;
    auto done = [this, key, w](bool ok) {
      w->busy = false;
      if (!ok && w->dst && !w->failed) {
        w->failed = true;
        ReceiveFailed(w->req_id, w->gen, key.first, key.second);
      }
      if (w->left == 0) {
        // The last chunk is in: this reply leaves the queue (it is its front: only the front takes chunks).
        auto wi = chunk_waits.find(key);
        if (wi != chunk_waits.end()) {
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

  void CheckDeadlines(int64_t now) {
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

  void Heard(int src) {
    if (peers.Heard(src, dp::NowUs())) Info("rank %d answers again: reading from it again", src);
  }

  void ProbeDownPeers() {
    for (int r = 0; r < o.nranks; ++r) {
      if (r == o.rank || !peers.TakeProbe(r)) continue;
      // One probe per down event: a stopped peer answers it when it runs again; a dead one never does, and
      // nothing more is ever queued towards it.
      SendRequest(r, 0, kKindProbe, ByteRange{}, nullptr);
    }
  }

  // ---- owner side -------------------------------------------------------------------------------------------

  // A peer asks for a range of ours (or probes us): read it behind the reply header and send (errors are
  // replied, never dropped).
  void ServePeer(int src, const char* req, int count, bool waited = false) {
    uint64_t req_id = count >= static_cast<int>(kRequestBytes) ? Load64(req) : 0;
    uint32_t part = Load32(req + 8), kind = Load32(req + 12);
    uint64_t off = Load64(req + 16), len = Load64(req + 24);
    int tag = kTagReplyBase + SlotOf(req_id);
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
      if (local->Await(part, off, len, [this, src, copy] { ServePeer(src, copy.data(), kRequestBytes, true); })) return;
    }
    if (kind == kKindFetch || (kind == kKindStaged && len > 0))
      stats->peer_requests.fetch_add(1, std::memory_order_relaxed);
    uint64_t n = s.ok() ? len : 0;
    if (o.maps && n >= o.mapped_send_min && local->Staged(part, off, n)) {
      if (const char* mapped = o.maps->Pin(part, off, n)) return SendMapped(src, tag, req_id, part, mapped, n);
    }
    std::string msg = s.ok() ? std::string() : s.message().substr(0, dp::kMaxReplyMessage);
    uint32_t chunks = n + kReplyHeader + msg.size() > o.max_message ? ChunksOf(n) : 0;
    auto buf = std::make_shared<BufferPool::Buf>(pool.Get(kReplyHeader + msg.size() + n));
    if (!buf->mem) {
      s = Status(Code::kNoMemory, "owner out of memory for a " + std::to_string(n) + "-byte range");
      msg = s.message();
      n = 0;
      chunks = 0;
      *buf = pool.Get(kReplyHeader + msg.size());
      if (!buf->mem) return;  // the asker times out and fails over
    }
    char* b = buf->mem.get();
    if (n > 0) {
      s = local->Read(part, off, n, b + kReplyHeader + msg.size(), kind == kKindStaged);
      if (!s.ok()) {
        msg = s.message().substr(0, dp::kMaxReplyMessage);
        n = 0;
        chunks = 0;
      }
    }
    StoreReplyHead(b, req_id, s.code(), static_cast<uint32_t>(msg.size()), n, chunks);
    std::memcpy(b + kReplyHeader, msg.data(), msg.size());
    // The buffer goes back to the pool when every send of it completed (never, if the asker died meanwhile).
    auto sends = std::make_shared<int>(1 + static_cast<int>(chunks));
    auto release = [this, buf, sends](bool) {
      if (--*sends == 0) pool.Put(std::move(*buf));
    };
    uint64_t head = kReplyHeader + msg.size() + (chunks ? 0 : n);
    Send(src, tag, b, head, release, nullptr);
    for (uint64_t c = 0; c < chunks; ++c) {
      uint64_t at = c * o.max_message;
      Send(src, tag, b + kReplyHeader + msg.size() + at, std::min(o.max_message, n - at), release, nullptr,
           o.chunk_comm);
    }
    stats->bytes_sent.fetch_add(n, std::memory_order_relaxed);
    Ring(src);
  }

  // Replies `n` bytes at `mapped` (pinned in partition `part`'s mapping): the header alone, then the payload in
  // chunks straight from the mapping. The pin is released when every send completed (never, if the asker died
  // meanwhile: a writer of that partition then waits for the kernel's lease-break time).
  void SendMapped(int src, int tag, uint64_t req_id, uint32_t part, const char* mapped, uint64_t n) {
    auto head = std::make_shared<std::array<char, kReplyHeader>>();
    char* b = head->data();
    const uint32_t chunks = ChunksOf(n);
    StoreReplyHead(b, req_id, Code::kOk, 0, n, chunks);
    auto sends = std::make_shared<int>(1 + static_cast<int>(chunks));
    auto release = [this, head, sends, part](bool) {
      if (--*sends == 0) o.maps->Unpin(part);
    };
    // A chunk that MPI could not send from the mapping, reported when it completes, to a peer that is not known to
    // be down (a send to a dead peer says nothing about the mapping): as below, at posting time.
    auto chunk_done = [this, release, src](bool ok) {
      if (!ok && peers.up(src))
        MappedSendFailed("a send from a partition's mapping to rank " + std::to_string(src) + " failed");
      release(ok);
    };
    Status head_err, chunk_err;
    Send(src, tag, b, kReplyHeader, release, &head_err);
    // Not a chunk after a header that did not go (the asker is gone: they would never be received, and stay
    // pinned), nor after a chunk that did not.
    for (uint64_t c = 0; c < chunks; ++c) {
      if (!head_err.ok() || !chunk_err.ok()) {
        release(false);
        continue;
      }
      uint64_t at = c * o.max_message;
      Send(src, tag, mapped + at, std::min(o.max_message, n - at), chunk_done, &chunk_err, o.chunk_comm);
    }
    if (!head_err.ok()) return;
    if (!chunk_err.ok()) {
      // The header went and its payload could not (some transports cannot send from a read-only file mapping:
      // RDMA registration of such pages can fail): the asker waits out this attempt and asks again, and from now
      // on every range is read into a send buffer.
      MappedSendFailed(chunk_err.message());
      return;
    }
    stats->mapped_sends.fetch_add(1, std::memory_order_relaxed);
    stats->bytes_sent.fetch_add(n, std::memory_order_relaxed);
    Ring(src);
  }

  void MappedSendFailed(const std::string& why) {
    if (o.maps->mapped() == 0) return;  // off already: said once
    Error("%s while sending from a partition's mapping; sending every range by pread from now on", why.c_str());
    o.maps->TurnOff();
  }

  // ---- progress ---------------------------------------------------------------------------------------------

  // Drains every message that has arrived; true if there was any.
  bool PollIncoming() {
    bool any = false;
    MPI_Message m;
    MPI_Status st;
    int count = 0;
    while (ProbeNext(MPI_COMM_WORLD, "message", &m, &st, &count)) {
      any = true;
      if (count < 0) continue;
      Heard(st.MPI_SOURCE);
      if (st.MPI_TAG == kTagRequest) {
        // At most 32 bytes: complete on arrival (eager), so this Mrecv returns at once. A longer one is received
        // without waiting for it, dropped and answered as malformed.
        char req[kRequestBytes] = {};
        if (count > static_cast<int>(kRequestBytes)) Drop(m, static_cast<uint64_t>(count), nullptr);
        else MPI_Mrecv(req, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
        ServePeer(st.MPI_SOURCE, req, count);
      } else if (st.MPI_TAG >= kTagReplyBase) {
        OnReply(m, st.MPI_SOURCE, st.MPI_TAG, count);
      } else {
        // Not ours (chunks travel on the chunk communicator, probed apart): receive and drop it so it does not sit
        // in the queue forever.
        Drop(m, static_cast<uint64_t>(count), nullptr);
      }
    }
    return any;
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
    FlushDoorbell();  // for the fetches started since the last step (clients, prefetch)
    if (o.maps) o.maps->CheckLeases();
    bool did = PollIncoming();
    did |= Reap();
    did |= PollChunks();
    CheckDeadlines(dp::NowUs());
    ProbeDownPeers();
    FlushDoorbell();
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
  int64_t oldest = INT64_MAX;
  for (auto& [id, p] : impl_->pending) oldest = std::min(oldest, p.attempt_start);
  *oldest_us = oldest;
  return true;
}

void MpiTransport::Shutdown() { impl_->Shutdown(); }

}  // namespace fanstore::daemon
