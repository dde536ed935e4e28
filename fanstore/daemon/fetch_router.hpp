// Where a client's fetch is answered from: this node's staged partitions (or, not staged yet, the image directory),
// the fetch cache, a fetch of the same range already in flight (joined: N readers of one file cost one transfer),
// or a new fetch from a peer -- whose reply lands directly in the asking client's reply area. Also runs the prefetch
// hints: ranges fetched ahead into the fetch cache, within a bounded window. Single-threaded (the daemon's progress
// thread); reads of the image directory go to ImageDirReads' threads, and their replies follow from its Poll.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "byte_range.hpp"
#include "fanstore/image.hpp"
#include "fetch_cache.hpp"
#include "image_dir_reader.hpp"
#include "peer_fetcher.hpp"
#include "prefetcher.hpp"
#include "socket_server.hpp"
#include "staged_reader.hpp"
#include "stats.hpp"

namespace fanstore::daemon {

struct RouterOptions {
  uint64_t prefetch_window = 256ull << 20;  // bytes fetched ahead and not read yet, at most
  size_t max_hinted = SIZE_MAX;             // hinted ranges kept over all streams
  int64_t prefetch_idle_us = 10000000;      // a stream not read for this long yields the window to active ones
  // While a partition of ours is staged: the rank that reads piece k of `part` from the image directory (it may
  // have it already), or -1 when that is this rank. Empty: ask nobody (the image directory serves).
  std::function<int(uint32_t part, size_t piece)> piece_reader;
  // --timeout: a client gives up on a fetch after this long (a read of the image directory is given as long).
  int64_t timeout_us = 5000000;
};

class FetchRouter final : public RequestHandler {
 public:
  // `image_dir` (may be null) reads what no rank can send, and what is not staged here yet.
  FetchRouter(std::shared_ptr<const Image> img, StagedReader* local, PeerFetcher* transport, FetchCache* cache,
              SocketServer* clients, DaemonStats* stats, RouterOptions o, ImageDirReads* image_dir = nullptr);

  void OnFetch(uint64_t conn, uint64_t req_id, const ByteRange& r) override;
  // Drops what the cache holds of `r`; for a partition held here, stops serving this node's clients from this copy
  // and asks the other holders (then the image directory), else answers from the image directory.
  void OnFetchFromSource(uint64_t conn, uint64_t req_id, const ByteRange& r) override;
  PathKind Resolve(std::string_view path, ByteRange* r) override;
  Status OnHint(uint64_t stream, std::vector<ByteRange> ranges, bool append) override;
  // Starts prefetches while the window allows; true when it started any.
  bool Pump();
  // Brings the statistics up to date with what clients read straight from the shared cache (before the exit line).
  void Settle();

  class Fetch;

 private:
  void Consumed(const FetchCache::Tag& tag);
  // Prefetched ranges that readers took straight from the shared cache count as read; true when there were any.
  bool TakeSharedReads();
  // Answers a range of a partition held here from the staged copy (or, not staged yet, the image directory, whose
  // reply follows later); false when that copy is unreadable (the caller goes to the other replicas).
  bool ServeLocal(uint64_t conn, uint64_t req_id, const ByteRange& r, int64_t t0);
  // Answers `r` from the image directory (image_dir_ must be set).
  void AnswerFromImageDir(uint64_t conn, uint64_t req_id, const ByteRange& r, int64_t t0);
  // Joins a fetch of `r` already in flight (N readers of one range cost one transfer), or starts one: from rank
  // `from` alone, or (-1) from the partition's holders in turn.
  void JoinOrFetch(uint64_t conn, uint64_t req_id, const ByteRange& r, int64_t t0, int from);
  void Untag(const std::vector<ByteRange>& ranges);

  std::shared_ptr<const Image> img_;
  StagedReader* local_;
  PeerFetcher* transport_;
  FetchCache* cache_;
  SocketServer* clients_;
  DaemonStats* stats_;
  RouterOptions o_;
  ImageDirReads* image_dir_;
  std::set<uint32_t> from_image_dir_;  // partitions a line said are read from the image directory
  Prefetcher prefetcher_;
  std::unordered_map<ByteRange, Fetch*, ByteRangeHash> inflight_;
  int prefetch_inflight_ = 0;
  int64_t last_scan_us_ = 0;
  uint64_t prefetch_inflight_bytes_ = 0;
  std::set<uint32_t> bad_local_;  // staged partitions that failed a read: served by the other replicas
  std::set<uint32_t> damaged_;    // partitions whose bytes a client found damaged (a line said so)
};

}  // namespace fanstore::daemon
