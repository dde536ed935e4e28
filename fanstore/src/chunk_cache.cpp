// ChunkCache: LRU of decoded chunks plus the table of loads in flight (see chunk_cache.hpp).
#include "chunk_cache.hpp"

#include <new>

namespace fanstore {

Result<ChunkCache::Bytes> ChunkCache::Get(uint32_t id, uint64_t index, const Loader& load, bool* hit,
                                          const std::function<bool()>& wanted) {
  const Key k{id, index};
  std::shared_ptr<Pending> mine;
  {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (auto it = map_.find(k); it != map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        *hit = true;
        return it->second->second;
      }
      auto p = pending_.find(k);
      if (p == pending_.end()) break;
      std::shared_ptr<Pending> theirs = p->second;
      cv_.wait(lk, [&] { return theirs->done; });
      if (theirs->bytes) {
        *hit = true;
        return theirs->bytes;
      }
      if (!theirs->status.ok()) return theirs->status;
      // Abandoned (a fork dropped it): look again, and load it ourselves if still nobody has it.
    }
    if (wanted && !wanted()) {
      *hit = false;
      return Bytes();
    }
    mine = std::make_shared<Pending>();
    pending_[k] = mine;
  }
  *hit = false;
  Result<Bytes> r = [&]() -> Result<Bytes> {
    try {
      return load();
    } catch (const std::bad_alloc&) {
      return Status(Code::kNoMemory, "out of memory decoding a chunk");
    }
  }();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto p = pending_.find(k); p != pending_.end() && p->second == mine) pending_.erase(p);
    mine->done = true;
    if (r.ok()) {
      mine->bytes = *r;
      InsertLocked(k, *r);
    } else {
      mine->status = r.status();
    }
  }
  cv_.notify_all();
  return r;
}

bool ChunkCache::Has(uint32_t id, uint64_t index) {
  const Key k{id, index};
  std::lock_guard<std::mutex> lk(mu_);
  return map_.count(k) != 0 || pending_.count(k) != 0;
}

ChunkCache::Bytes ChunkCache::Find(uint32_t id, uint64_t index) {
  const Key k{id, index};
  std::unique_lock<std::mutex> lk(mu_);
  if (auto it = map_.find(k); it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  auto p = pending_.find(k);
  if (p == pending_.end()) return nullptr;
  std::shared_ptr<Pending> theirs = p->second;
  cv_.wait(lk, [&] { return theirs->done; });
  return theirs->bytes;
}

void ChunkCache::Put(uint32_t id, uint64_t index, Bytes b) {
  std::lock_guard<std::mutex> lk(mu_);
  InsertLocked(Key{id, index}, std::move(b));
}

void ChunkCache::Drop(uint32_t id, uint64_t index) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = map_.find(Key{id, index});
  if (it == map_.end()) return;
  used_ -= it->second->second->size();
  lru_.erase(it->second);
  map_.erase(it);
}

void ChunkCache::InsertLocked(const Key& k, Bytes b) {
  const uint64_t n = b->size();
  // One chunk larger than a quarter of the budget would flush too much of the rest: not kept.
  if (budget_ == 0 || n > budget_ / 4 || map_.count(k)) return;
  lru_.emplace_front(k, std::move(b));
  map_[k] = lru_.begin();
  used_ += n;
  while (used_ > budget_ && !lru_.empty()) {
    auto last = std::prev(lru_.end());
    used_ -= last->second->size();
    map_.erase(last->first);
    lru_.erase(last);
  }
}

void ChunkCache::UnlockForFork(bool child) {
  if (child) {
    for (auto& [k, p] : pending_) p->done = true;  // no status, no bytes: "abandoned", waiters retry
    pending_.clear();
    // The parent's threads may have been waiting on cv_: its copy here counts waiters that do not exist,
    // which a later notify could wait for. Start it afresh (nothing waits on it in the child).
    new (&cv_) std::condition_variable();
  }
  mu_.unlock();
}

}  // namespace fanstore
