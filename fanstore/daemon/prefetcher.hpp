// Clairvoyant prefetch (docs/daemon.md, "Prefetch hints"): the hinted reading order of each stream (one per reader)
// and how far ahead of it the daemon may fetch. Pure bookkeeping, no I/O. Each hint is a new generation of its
// stream, so that fetches of a replaced (or forgotten) hint that complete later are recognised as stale.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "byte_range.hpp"
#include "fanstore/status.hpp"

namespace fanstore::daemon {

class Prefetcher {
 public:
  struct Item {
    ByteRange range;
    uint64_t stream = 0;
    uint64_t gen = 0;    // the hint it belongs to
    uint64_t index = 0;  // position in the stream's hint
  };

  // `max_ahead`: at most this many positions past the last one read are fetched; `max_streams`: the oldest
  // stream is forgotten when a new one would exceed it; `max_ranges`: hinted ranges kept over all streams.
  explicit Prefetcher(size_t max_ahead = 4096, size_t max_streams = 64, size_t max_ranges = SIZE_MAX)
      : max_ahead_(max_ahead), max_streams_(max_streams), max_ranges_(max_ranges) {}

  // Sets (or with `append`, extends) stream `id`'s order, at time `now_us`. Returns the ranges of replaced or
  // forgotten hints that were fetched but never read (their cache entries should lose their prefetch tag).
  // Older streams are forgotten to keep within max_ranges; kInvalidArgument (nothing changed) when this stream
  // alone would exceed it.
  Result<std::vector<ByteRange>> Hint(uint64_t id, std::vector<ByteRange> ranges, bool append, int64_t now_us = 0);

  // The next range to fetch ahead, taking the streams in turn; `skip` says which ranges need no fetch (cached,
  // in flight). nullopt: every stream is done or as far ahead as allowed.
  std::optional<Item> Next(const std::function<bool(const ByteRange&)>& skip);

  // Whether generation `gen` of stream `id` is still the current hint (a fetch of an older one is stale).
  bool Live(uint64_t id, uint64_t gen) const;
  // A reader read position `index` of stream `id`'s hint `gen` (a tagged cache hit, or a fetch it waited for), at
  // `now_us`. Returns the ranges fetched ahead that the readers have passed by without reading (their tags should
  // go). A stale generation changes nothing.
  std::vector<ByteRange> Consumed(uint64_t id, uint64_t gen, uint64_t index, int64_t now_us = 0);
  // A fetch started by Next() failed: forget it (the reader will fetch the range itself). Returns passed-by
  // ranges as Consumed does.
  std::vector<ByteRange> Dropped(uint64_t id, uint64_t gen, uint64_t index);
  // The window is full: streams whose reader read nothing for `idle_us` are forgotten (returning the ranges they
  // fetched ahead and nobody read), but only while another stream, active within `idle_us`, has more to fetch.
  std::vector<ByteRange> ReleaseIdle(int64_t now_us, int64_t idle_us);

  size_t streams() const { return streams_.size(); }

 private:
  struct Stream {
    uint64_t id = 0;
    uint64_t gen = 0;
    std::vector<ByteRange> order;
    size_t next = 0;        // next position to look at
    size_t read_to = 0;     // one past the furthest position read
    int64_t active_us = 0;  // the hint, or the latest read of it
    struct Ahead {
      uint64_t pos;
      ByteRange range;
      bool done;  // read (or dropped): only waits to be popped off the front
    };
    std::deque<Ahead> ahead;  // fetched (or in flight) and not read, in position order
    bool HasWork(size_t max_ahead) const { return next < order.size() && next < read_to + max_ahead; }
  };
  Stream* Find(uint64_t id);
  Stream* Find(uint64_t id, uint64_t gen);
  // Forgets stream `i`, adding what it fetched ahead and nobody read to *released.
  void Forget(size_t i, std::vector<ByteRange>* released);
  size_t TotalRanges() const;
  // Marks position `index` done; pops done and passed-by entries off the front (passed ones into *passed).
  void Settle(Stream* s, uint64_t index, std::vector<ByteRange>* passed);

  size_t max_ahead_, max_streams_, max_ranges_;
  std::deque<Stream> streams_;  // oldest hint first
  size_t turn_ = 0;
  uint64_t next_gen_ = 1;
};

}  // namespace fanstore::daemon
