#include "fetch_router.hpp"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "fanstore/protocol/payload_memfd.hpp"
#include "log.hpp"

namespace fanstore::daemon {

namespace dp = daemon_proto;
constexpr int kPrefetchInflight = 16;  // prefetch fetches in flight, at most (docs/daemon.md, "Prefetch hints")

class FetchRouter::Fetch final : public FetchSink {
 public:
  Fetch(FetchRouter* r, const ByteRange& range) : router_(r), range_(range) { r->inflight_[range] = this; }

  struct Waiter {
    uint64_t conn = 0, req_id = 0;
    int64_t t0_us = 0;
  };
  std::vector<Waiter> waiters;
  bool prefetch = false;
  bool suspect = false;  // a client found these bytes damaged meanwhile: this fetch's are not cached
  FetchCache::Tag tag;   // the hint position, for a prefetch

  char* Land(uint64_t n) override {
    area_.reset();
    cache_buf_ = CacheBuffer();
    buf_.reset();
    // One client waits and nothing else wants the bytes yet: straight into its reply area (the cache copies them
    // after the reply). Otherwise into cache memory, or plain memory when the cache will not keep them.
    if (waiters.size() == 1 && !prefetch) {
      area_ = router_->clients_->LandFor(waiters[0].conn, n);
      if (area_) return area_->base;
    }
    if (router_->cache_->Admits(range_.length)) {
      cache_buf_ = router_->cache_->Allocate(n);
      if (cache_buf_.mem) return cache_buf_.mem.data();
    }
    buf_.reset(new (std::nothrow) char[n]);
    return buf_.get();
  }

  std::shared_ptr<void> Abandon() override {
    if (area_) {
      area_->poisoned = true;  // never handed out again: MPI may still write it
      return std::exchange(area_, nullptr);
    }
    if (cache_buf_.mem) return std::make_shared<CacheBuffer>(std::move(cache_buf_));
    return std::shared_ptr<char[]>(buf_.release());
  }

  void Done(const Status& s, const char* data, uint64_t len) override {
    if (!s.ok() && FromImageDir(s)) return;  // Finish follows
    Finish(s, data, len);
  }

 private:
  void Finish(const Status& s, const char* data, uint64_t len) {
    FetchRouter* r = router_;
    r->inflight_.erase(range_);
    if (prefetch) {
      --r->prefetch_inflight_;
      r->prefetch_inflight_bytes_ -= range_.length;
    }
    // The replies go out first (the latency path); the client's next request on its connection -- which may
    // reuse the area this landed in -- is only read after this returns (SocketServer defers it).
    int64_t now = dp::NowUs();
    for (const Waiter& w : waiters) {
      r->clients_->Deliver(w.conn, w.req_id, s, data, len);
      r->stats_->AddLatency(static_cast<uint64_t>(now - w.t0_us));
    }
    if (prefetch && s.ok() && !waiters.empty()) r->Consumed(tag);  // read while in flight
    else if (prefetch && (!s.ok() || suspect)) r->Untag(r->prefetcher_.Dropped(tag.stream, tag.gen, tag.index));
    if (s.ok() && !suspect && r->cache_->Admits(len)) {
      CacheBuffer cb;
      const char* at = cache_buf_.mem.data();
      if (at && data >= at && data + len <= at + cache_buf_.mem.capacity()) {
        cb = std::move(cache_buf_);
        cb.data = data;
      } else {
        // It landed in a client's area (which the client reuses): the cache keeps its own copy.
        cb = r->cache_->Allocate(len);
        if (cb.mem) std::memcpy(cb.mem.data(), data, len);
      }
      // Tagged only while its hint is current: a fetch of a replaced or forgotten hint is an ordinary entry (its
      // tag would hold the window, or move the new hint's cursor, forever).
      FetchCache::Tag keep;
      if (prefetch && waiters.empty() && r->prefetcher_.Live(tag.stream, tag.gen)) keep = tag;
      if (cb.mem && !r->cache_->Insert(range_, std::move(cb), keep) && keep.prefetched)
        r->Untag(r->prefetcher_.Dropped(tag.stream, tag.gen, tag.index));
    }
    delete this;
  }

  // No rank could send the range (its holders are gone, or have not staged it and cannot read it): the image
  // directory still has it (counted, and paced with staging), read off the progress thread; Finish follows (in
  // the fetch, so that readers of the range join it meanwhile). A range outside the partition stays an error.
  // False: no image directory to read.
  bool FromImageDir(const Status& why) {
    FetchRouter* r = router_;
    if (!r->image_dir_ || why.code() == Code::kInvalidArgument) return false;
    // Until the first waiting client gives up (a prefetch: a timeout from now).
    int64_t deadline = dp::NowUs() + r->o_.timeout_us;
    for (const Waiter& w : waiters) deadline = std::min(deadline, w.t0_us + r->o_.timeout_us);
    r->image_dir_->Read(range_.part, range_.offset, range_.length, deadline,
                        [this, why](const Status& s, const char* data, uint64_t len) {
                          if (!s.ok())
                            return Finish(
                                Status(s.code(), why.message() + "; then from the image directory: " + s.message()),
                                nullptr, 0);
                          if (router_->from_image_dir_.insert(range_.part).second)
                            Error(
                                "no rank could send a range of partition %u (%s); such ranges are read from the "
                                "image directory",
                                range_.part, why.ToString().c_str());
                          Finish(Status::Ok(), data, len);
                        });
    return true;
  }

  FetchRouter* router_;
  ByteRange range_;
  std::shared_ptr<ReplyArea> area_;
  CacheBuffer cache_buf_;
  std::unique_ptr<char[]> buf_;
};

FetchRouter::FetchRouter(std::shared_ptr<const Image> img, StagedReader* local, PeerFetcher* transport,
                         FetchCache* cache, SocketServer* clients, DaemonStats* stats, RouterOptions o,
                         ImageDirReads* image_dir)
    : img_(std::move(img)),
      local_(local),
      transport_(transport),
      cache_(cache),
      clients_(clients),
      stats_(stats),
      o_(o),
      image_dir_(image_dir),
      prefetcher_(4096, 64, o.max_hinted) {}

void FetchRouter::OnFetch(uint64_t conn, uint64_t req_id, const ByteRange& r) {
  int64_t t0 = dp::NowUs();
  // A partition staged here (the client normally reads those itself: this covers a client whose view is older
  // than ours). Read straight into its reply area.
  if (local_->Has(r.part) && !bad_local_.count(r.part)) {
    // A range outside the staged file is an error reply before any memory is set aside for it.
    Status s = local_->Check(r.part, r.offset, r.length);
    if (!s.ok() && s.code() == Code::kInvalidArgument) {
      clients_->Deliver(conn, req_id, s, nullptr, 0);
      return;
    }
    // Not staged here yet: when staging here reads that piece, it reads it next and the reply waits for it (the
    // shared file system is read once); when another rank does, that rank is asked (it serves it the same way);
    // should it fail, the image directory (Fetch::Done).
    if (local_->Await(r.part, r.offset, r.length, [this, conn, req_id, r, t0] {
          if (!ServeLocal(conn, req_id, r, t0)) OnFetch(conn, req_id, r);
        }))
      return;
    size_t piece = 0;
    int from = -1;
    if (o_.piece_reader && !local_->Staged(r.part, r.offset, r.length) &&
        local_->InOnePiece(r.part, r.offset, r.length, &piece) && (from = o_.piece_reader(r.part, piece)) >= 0)
      return JoinOrFetch(conn, req_id, r, t0, from);
    if (ServeLocal(conn, req_id, r, t0)) return;
  }
  FetchCache::Tag tag;
  if (const char* hit = cache_->Find(r, &tag)) {
    stats_->cache_hits.fetch_add(1, std::memory_order_relaxed);
    if (tag.prefetched) {
      stats_->prefetch_hits.fetch_add(1, std::memory_order_relaxed);
      Consumed(tag);
    }
    clients_->Deliver(conn, req_id, Status::Ok(), hit, r.length);
    stats_->AddLatency(static_cast<uint64_t>(dp::NowUs() - t0));
    return;
  }
  JoinOrFetch(conn, req_id, r, t0, -1);
}

void FetchRouter::OnFetchFromSource(uint64_t conn, uint64_t req_id, const ByteRange& r) {
  // A client asks again for one chunk's stored bytes: nothing longer reaches the image directory this way.
  if (r.length > ZSTD_compressBound(img_->ChunkSize())) {
    clients_->Deliver(conn, req_id,
                      Status(Code::kInvalidArgument,
                             "a fetch from the image directory is of one chunk's stored bytes, "
                             "not " +
                                 std::to_string(r.length)),
                      nullptr, 0);
    return;
  }
  cache_->Remove(r);
  if (auto it = inflight_.find(r); it != inflight_.end()) it->second->suspect = true;  // likely the same bytes
  const bool ours = local_->Has(r.part);
  if (damaged_.insert(r.part).second)
    Error("a client found bytes of partition %u damaged (%s): such ranges are read from %s", r.part,
          ours ? "in this node's staged copy" : "from the fetch cache or another rank's copy",
          ours ? "the other replicas, or the image directory" : "the image directory");
  // Our copy: the other holders, then the image directory (OnFetch, which skips a partition in bad_local_).
  if (ours) bad_local_.insert(r.part);
  if (ours || !image_dir_) return OnFetch(conn, req_id, r);
  // Another rank's copy or our cache: that rank might send the same bytes again; the image directory cannot be wrong.
  const int64_t t0 = dp::NowUs();
  AnswerFromImageDir(conn, req_id, r, t0);
}

void FetchRouter::AnswerFromImageDir(uint64_t conn, uint64_t req_id, const ByteRange& r, int64_t t0) {
  // Off this thread (a slow shared file system must not stall the daemon); an answer, bytes or error, before the
  // client gives up.
  image_dir_->Read(r.part, r.offset, r.length, t0 + o_.timeout_us * 9 / 10,
                   [this, conn, req_id, t0](const Status& s, const char* data, uint64_t len) {
                     clients_->Deliver(conn, req_id, s, data, len);
                     stats_->AddLatency(static_cast<uint64_t>(dp::NowUs() - t0));
                   });
}

void FetchRouter::JoinOrFetch(uint64_t conn, uint64_t req_id, const ByteRange& r, int64_t t0, int from) {
  if (auto it = inflight_.find(r); it != inflight_.end()) {
    stats_->coalesced.fetch_add(1, std::memory_order_relaxed);
    if (it->second->prefetch && it->second->waiters.empty())
      stats_->prefetch_hits.fetch_add(1, std::memory_order_relaxed);
    it->second->waiters.push_back({conn, req_id, t0});
    return;
  }
  auto* f = new Fetch(this, r);
  f->waiters.push_back({conn, req_id, t0});
  if (from >= 0) transport_->FetchFrom(from, r, false, f);
  else transport_->Fetch(r, f);
}

bool FetchRouter::ServeLocal(uint64_t conn, uint64_t req_id, const ByteRange& r, int64_t t0) {
  if (image_dir_ && !local_->Staged(r.part, r.offset, r.length)) {
    AnswerFromImageDir(conn, req_id, r, t0);  // not staged here yet
    return true;
  }
  std::shared_ptr<ReplyArea> a = clients_->LandFor(conn, r.length);
  if (!a) {
    // No memory for the reply (or the connection is gone, and then this is ignored): say so now rather than
    // leave the client waiting out its timeout.
    clients_->Deliver(conn, req_id,
                      Status(Code::kNoMemory, "daemon has no memory for a " + std::to_string(r.length) + "-byte reply"),
                      nullptr, 0);
    return true;
  }
  Status s = local_->Read(r.part, r.offset, r.length, a->base);
  if (s.ok() || s.code() == Code::kInvalidArgument) {
    clients_->Deliver(conn, req_id, s, a->base, s.ok() ? r.length : 0);
    stats_->AddLatency(static_cast<uint64_t>(dp::NowUs() - t0));
    return true;
  }
  // Our copy is unreadable (deleted, truncated): the other replicas may still have it. Said once per partition.
  if (bad_local_.insert(r.part).second)
    Error("reading staged partition %u failed (%s); it is served by the other replicas from now on", r.part,
          s.ToString().c_str());
  return false;
}

RequestHandler::PathKind FetchRouter::Resolve(std::string_view path, ByteRange* r) {
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  auto id = img_->Lookup(path);
  if (!id.ok()) return PathKind::kMissing;
  Entry e = img_->Get(*id);
  if (!e.is_reg() || !img_->CheckLayout(e).ok()) return PathKind::kMissing;  // a read of it is EIO anyway
  if (e.stored_size == 0 || img_->HasPartition(e.part)) return PathKind::kLocal;
  *r = ByteRange{e.part, e.offset, e.stored_size};
  return PathKind::kRemote;
}

bool FetchRouter::TakeSharedReads() {
  bool any = false;
  for (const FetchCache::Tag& t : cache_->TakeSharedReads()) {
    stats_->prefetch_hits.fetch_add(1, std::memory_order_relaxed);
    Consumed(t);
    any = true;
  }
  return any;
}

void FetchRouter::Settle() {
  TakeSharedReads();
  stats_->shared_hits.store(cache_->SharedHits(), std::memory_order_relaxed);
}

Status FetchRouter::OnHint(uint64_t stream, std::vector<ByteRange> ranges, bool append) {
  if (cache_->budget() == 0)
    return Status(Code::kInvalidArgument,
                  "prefetch is off: this daemon runs with --cache-bytes 0, which keeps no bytes fetched ahead");
  auto released = prefetcher_.Hint(stream, std::move(ranges), append, dp::NowUs());
  if (!released.ok()) return released.status();
  Untag(*released);
  return Status::Ok();
}

void FetchRouter::Untag(const std::vector<ByteRange>& ranges) {
  for (const ByteRange& r : ranges) cache_->Untag(r);
}

void FetchRouter::Consumed(const FetchCache::Tag& tag) {
  Untag(prefetcher_.Consumed(tag.stream, tag.gen, tag.index, dp::NowUs()));
}

bool FetchRouter::Pump() {
  if (cache_->budget() == 0 || prefetcher_.streams() == 0) return false;
  bool did = false;
  // Readers that took prefetched ranges straight from the shared index move the prefetch window too (looked at
  // every millisecond: the scan walks the ranges fetched ahead).
  int64_t now = dp::NowUs();
  if (now - last_scan_us_ >= 1000) {
    last_scan_us_ = now;
    did = TakeSharedReads();
  }
  for (;;) {
    if (prefetch_inflight_ >= kPrefetchInflight) break;
    if (cache_->tagged_bytes() + prefetch_inflight_bytes_ >= o_.prefetch_window) {
      // The window is full: a stream whose reader went away (or stopped early) must not hold it for good.
      std::vector<ByteRange> idle = prefetcher_.ReleaseIdle(now, o_.prefetch_idle_us);
      if (idle.empty()) break;
      Untag(idle);
      did = true;
      continue;
    }
    auto item = prefetcher_.Next([this](const ByteRange& r) {
      return !cache_->Admits(r.length) || cache_->Contains(r) || inflight_.count(r) > 0;
    });
    if (!item) break;
    auto* f = new Fetch(this, item->range);
    f->prefetch = true;
    f->tag = FetchCache::Tag{true, item->stream, item->index, item->gen};
    ++prefetch_inflight_;
    prefetch_inflight_bytes_ += item->range.length;
    stats_->prefetched.fetch_add(1, std::memory_order_relaxed);
    did = true;
    transport_->Fetch(item->range, f);
  }
  return did;
}

}  // namespace fanstore::daemon
