// The daemon's node RAM cache (`fanstore serve --cache-bytes`): stored bytes fetched from other nodes, shared by
// every client process of the node, so N DataLoader workers reading one remote file cost one fetch. Bounded by
// bytes; least recently used ranges go first, ranges prefetched but not read yet last. Clients never see cache
// memory: a hit is copied into the client's own reply area, so evicting a range never changes bytes a client
// holds. Single-threaded (the daemon's progress thread).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <unordered_map>

#include "byte_range.hpp"
#include "slab.hpp"

namespace fanstore::daemon {

// One allocation holding a fetched range at `data` (after the transport's reply header).
struct CacheBuffer {
  SlabBlock mem;
  const char* data = nullptr;
};

class NodeCache {
 public:
  // A range fetched ahead for prefetch stream `stream` at position `index` of its hint, not read yet.
  struct Tag {
    bool prefetched = false;
    uint64_t stream = 0;
    uint64_t index = 0;
  };

  explicit NodeCache(uint64_t budget_bytes) : budget_(budget_bytes) {}

  uint64_t budget() const { return budget_; }
  uint64_t used() const { return used_; }
  uint64_t tagged_bytes() const { return tagged_; }
  size_t entries() const { return lru_.size() + tagged_list_.size(); }
  // Ranges bigger than a quarter of the budget are not kept (one file must not flush the whole cache).
  bool Admits(uint64_t n) const { return budget_ > 0 && n <= budget_ / 4; }

  // The bytes of `r` when one cached range contains it, else null. Counts as a use (LRU). A prefetched range
  // read for the first time loses its tag, which is returned in *consumed (prefetched = false otherwise).
  const char* Find(const ByteRange& r, Tag* consumed);
  bool Contains(const ByteRange& r) const;
  // Keeps `buf` as the bytes of `r` (buf.data points at r.length bytes), evicting as needed. False (and
  // nothing kept) when it does not fit even after evicting everything evictable, or `r` is already cached.
  bool Insert(const ByteRange& r, CacheBuffer buf, Tag tag);
  // Drops the prefetch tag of `r` (a hint replaced, or a range skipped by the reader): evictable as usual now.
  void Untag(const ByteRange& r);

 private:
  struct Node {
    ByteRange range;
    CacheBuffer buf;
    Tag tag;
  };
  using List = std::list<Node>;
  const List::iterator* Locate(const ByteRange& r) const;
  void Erase(List::iterator it, List* from);
  bool EvictOne();

  uint64_t budget_;
  uint64_t used_ = 0;
  uint64_t tagged_ = 0;
  List lru_;          // untagged, most recently used first
  List tagged_list_;  // prefetched and not read yet, oldest first
  // part -> start offset -> node (in whichever list holds it).
  std::unordered_map<uint32_t, std::map<uint64_t, List::iterator>> index_;
};

}  // namespace fanstore::daemon
