// Clairvoyant prefetch: the hinted reading order of each stream (one per reader, e.g. per rank or per sampler)
// and how far ahead of the reader the daemon may fetch. Pure bookkeeping, no I/O: the daemon asks Next() for the
// range to fetch and reports what the readers consume. A new hint replaces the stream's previous one (a new epoch).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "byte_range.hpp"

namespace fanstore::daemon {

class Prefetcher {
 public:
  struct Item {
    ByteRange range;
    uint64_t stream = 0;
    uint64_t index = 0;  // position in the stream's hint
  };

  // `max_ahead`: at most this many positions past the last one read are fetched; `max_streams`: the oldest
  // stream is forgotten when a new one would exceed it.
  explicit Prefetcher(size_t max_ahead = 4096, size_t max_streams = 64)
      : max_ahead_(max_ahead), max_streams_(max_streams) {}

  // Sets (or with `append`, extends) stream `id`'s order. Returns the ranges of the replaced hint that were
  // fetched but never read: their cache entries should lose their prefetch tag.
  std::vector<ByteRange> Hint(uint64_t id, std::vector<ByteRange> ranges, bool append);

  // The next range to fetch ahead, taking the streams in turn; `skip` says which ranges need no fetch (cached,
  // in flight). nullopt: every stream is done or as far ahead as allowed.
  std::optional<Item> Next(const std::function<bool(const ByteRange&)>& skip);

  // A reader read position `index` of stream `id` (a tagged cache hit, or a fetch it waited for). Returns the
  // ranges fetched ahead that the readers have passed by without reading (their tags should go).
  std::vector<ByteRange> Consumed(uint64_t id, uint64_t index);
  // A fetch started by Next() failed: forget it (the reader will fetch the range itself). Returns passed-by
  // ranges as Consumed does.
  std::vector<ByteRange> Dropped(uint64_t id, uint64_t index);

  size_t streams() const { return streams_.size(); }
  uint64_t hinted() const { return hinted_; }

 private:
  struct Stream {
    uint64_t id = 0;
    std::vector<ByteRange> order;
    size_t next = 0;      // next position to look at
    size_t read_to = 0;   // one past the furthest position read
    struct Ahead {
      uint64_t pos;
      ByteRange range;
      bool done;  // read (or dropped): only waits to be popped off the front
    };
    std::deque<Ahead> ahead;  // fetched (or in flight) and not read, in position order
  };
  Stream* Find(uint64_t id);
  // Marks position `index` done; pops done and passed-by entries off the front (passed ones into *passed).
  void Settle(Stream* s, uint64_t index, std::vector<ByteRange>* passed);

  size_t max_ahead_, max_streams_;
  std::deque<Stream> streams_;  // oldest hint first
  size_t turn_ = 0;
  uint64_t hinted_ = 0;
};

}  // namespace fanstore::daemon
