// A byte-budgeted LRU of decoded files, shared by every open of the same file in one process.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "fanstore/client.hpp"

namespace fanstore {

class DecodedCache {
 public:
  explicit DecodedCache(uint64_t budget) : budget_(budget) {}
  std::shared_ptr<const FileBytes> Get(uint32_t id);
  // Keeps `bytes` unless it is larger than an eighth of the budget (one huge file must not flush the rest).
  void Put(uint32_t id, std::shared_ptr<const FileBytes> bytes);
  // fork support: the forking thread holds the lock across fork() and releases it on both sides,
  // so the child never inherits a mutex owned by a thread that does not exist there.
  void LockForFork() { mu_.lock(); }
  void UnlockForFork() { mu_.unlock(); }

 private:
  using Lru = std::list<std::pair<uint32_t, std::shared_ptr<const FileBytes>>>;
  uint64_t budget_;
  uint64_t used_ = 0;
  std::mutex mu_;
  Lru lru_;  // front = most recent
  std::unordered_map<uint32_t, Lru::iterator> map_;
};

// Heap (small) or anonymous-mmap (large) storage for decoded bytes.
std::unique_ptr<FileBytes> AllocateFileBytes(uint64_t size, char** writable);

}  // namespace fanstore
