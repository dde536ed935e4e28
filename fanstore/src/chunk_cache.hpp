// This process's decoded chunks: a byte-budgeted LRU shared by every open file, which also makes concurrent
// readers of one chunk (two threads, or a reader and the read-ahead) share a single decode.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "fanstore/client.hpp"

namespace fanstore {

class ChunkCache {
 public:
  using Bytes = std::shared_ptr<const FileBytes>;
  using Loader = std::function<Result<Bytes>()>;

  // `budget` bytes of decoded chunks are kept (0: none; loads in flight are still shared).
  explicit ChunkCache(uint64_t budget) : budget_(budget) {}
  uint64_t budget() const { return budget_; }

  // Chunk `index` of entry `id`: from the cache, from a load another thread has in flight, or from `load`
  // (called without the lock held). `*hit` tells whether it was cached already. With `wanted`, a chunk that
  // is neither cached nor in flight is loaded only if wanted() holds, asked under the lock (a read-ahead
  // whose reader got there first: the reader loads it, or joins this load, never both); otherwise the
  // result is a null Bytes.
  Result<Bytes> Get(uint32_t id, uint64_t index, const Loader& load, bool* hit,
                    const std::function<bool()>& wanted = nullptr);
  // True when the chunk is cached or being loaded (the read-ahead skips those).
  bool Has(uint32_t id, uint64_t index);
  // The cached chunk, or the result of a load in flight (waited for); null when neither exists or the load
  // failed. Loads nothing itself.
  Bytes Find(uint32_t id, uint64_t index);
  // Keeps `b` as chunk `index` of `id` (within the budget), e.g. bytes a reader decoded straight into its buffer.
  void Put(uint32_t id, uint64_t index, Bytes b);
  // Forgets a cached chunk (a sequential reader has passed it: drop-behind, so one pass over a large file
  // holds only the read-ahead window and its buffers are recycled).
  void Drop(uint32_t id, uint64_t index);

  // fork: the forking thread holds the lock across fork(); in the child, loads that the parent's other
  // threads had in flight are dropped (their threads do not exist there), so no one waits for them.
  void LockForFork() { mu_.lock(); }
  void UnlockForFork(bool child);

 private:
  struct Key {
    uint32_t id;
    uint64_t index;
    bool operator==(const Key& o) const { return id == o.id && index == o.index; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>()(k.index * 0x9E3779B97F4A7C15ull ^ k.id); }
  };
  struct Pending {
    bool done = false;
    Bytes bytes;
    Status status;
  };
  using Lru = std::list<std::pair<Key, Bytes>>;

  void InsertLocked(const Key& k, Bytes b);

  const uint64_t budget_;
  uint64_t used_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;  // a pending load finished
  Lru lru_;                     // front = most recent
  std::unordered_map<Key, Lru::iterator, KeyHash> map_;
  std::unordered_map<Key, std::shared_ptr<Pending>, KeyHash> pending_;
};

}  // namespace fanstore
