// The daemon's node RAM cache (`fanstore serve --cache-bytes`) of stored bytes fetched from other nodes, in a shared
// arena every client maps and copies from itself (shared_arena.hpp). Least recently used ranges go first, ranges
// prefetched but not read yet last. A range leaves the shared index before its memory is reused, so evicting never
// changes bytes a client holds. Single-threaded (the daemon's progress thread).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "byte_range.hpp"
#include "shared_arena.hpp"

namespace fanstore::daemon {

// One allocation holding a fetched range at `data` (after the transport's reply header).
struct CacheBuffer {
  ArenaBlock mem;
  const char* data = nullptr;
};

class FetchCache {
 public:
  // A range fetched ahead for prefetch stream `stream` at position `index` of its hint (generation `gen`), not
  // read yet.
  struct Tag {
    bool prefetched = false;
    uint64_t stream = 0;
    uint64_t index = 0;
    uint64_t gen = 0;
  };

  // Budget 0, or an arena that cannot be made (*why says why), is a cache that keeps nothing.
  FetchCache(uint64_t budget_bytes, Status* why = nullptr);

  uint64_t budget() const { return budget_; }
  uint64_t used() const { return used_; }
  uint64_t tagged_bytes() const { return tagged_; }
  int shared_fd() const { return arena_ ? arena_->fd() : -1; }
  const SharedArena* arena() const { return arena_.get(); }  // null: a cache that keeps nothing
  // Ranges bigger than a quarter of the budget are not kept (one file must not flush the whole cache).
  bool Admits(uint64_t n) const { return budget_ > 0 && n <= budget_ / 4; }

  // Memory for `n` bytes that may become a cached range, evicting cold ranges to make room; empty when none.
  CacheBuffer Allocate(uint64_t n);

  // The bytes of `r` when one cached range contains it, else null. Counts as a use (LRU). A prefetched range
  // read for the first time loses its tag, which is returned in *consumed (prefetched = false otherwise).
  const char* Find(const ByteRange& r, Tag* consumed);
  bool Contains(const ByteRange& r) const;
  // Keeps `buf` as the bytes of `r` (buf.data points at r.length bytes) and publishes it to the clients, evicting
  // as needed. False (and nothing kept) when it does not fit, or `r` is already cached.
  bool Insert(const ByteRange& r, CacheBuffer buf, Tag tag);
  // Forgets every cached range that overlaps `r` (bytes found bad): no client finds them from now on.
  void Remove(const ByteRange& r);
  // Drops the prefetch tag of `r` (a hint replaced, or a range skipped by the reader): evictable as usual now.
  void Untag(const ByteRange& r);
  // Prefetched ranges that clients read straight from the shared index since the last call: their tags go (they
  // count as used now); returned so that the prefetcher learns how far the readers are.
  std::vector<Tag> TakeSharedReads();
  // Reads clients made straight from the shared index (they never reach the daemon), so far.
  uint64_t SharedHits() const;

 private:
  struct Node {
    ByteRange range;
    CacheBuffer buf;
    Tag tag;
    int slot = -1;  // in the shared index; -1: not published (its probe window was full)
  };
  using List = std::list<Node>;
  const List::iterator* Locate(const ByteRange& r) const;
  void Erase(List::iterator it, List* from);
  bool EvictOne();
  // A prefetched range read or given up: an ordinary entry from now on, moved to `to` in the LRU list.
  void DropTag(List::iterator it, List::iterator to);

  uint64_t budget_;
  std::unique_ptr<SharedArena> arena_;
  uint64_t used_ = 0;
  uint64_t tagged_ = 0;
  uint64_t withdrawn_hits_ = 0;
  List lru_;          // untagged, most recently used first
  List tagged_list_;  // prefetched and not read yet, oldest first
  // part -> start offset -> node (in whichever list holds it).
  std::unordered_map<uint32_t, std::map<uint64_t, List::iterator>> index_;
};

}  // namespace fanstore::daemon
