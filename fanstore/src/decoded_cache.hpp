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
  // `max_fds` caps the entries that hold a memfd, so the cache never eats the program's fd limit.
  DecodedCache(uint64_t budget, size_t max_fds) : budget_(budget), max_fds_(max_fds) {}
  std::shared_ptr<const FileBytes> Get(uint32_t id);
  // Keeps `bytes` unless it is larger than half the budget (one huge file must not flush the rest).
  void Put(uint32_t id, std::shared_ptr<const FileBytes> bytes);
  // fork support: the forking thread holds the lock across fork() and releases it on both sides,
  // so the child never inherits a mutex owned by a thread that does not exist there.
  void LockForFork() { mu_.lock(); }
  void UnlockForFork() { mu_.unlock(); }

 private:
  using Lru = std::list<std::pair<uint32_t, std::shared_ptr<const FileBytes>>>;
  uint64_t budget_;
  size_t max_fds_;
  uint64_t used_ = 0;
  size_t fds_ = 0;
  std::mutex mu_;
  Lru lru_;  // front = most recent
  std::unordered_map<uint32_t, Lru::iterator> map_;
};

// Decoded bytes under construction: written through the pointer AllocateFileBytes returns, then
// Freeze()d, after which they can never change (memfd storage is write-sealed).
class DecodedBytes : public FileBytes {
 public:
  virtual bool Freeze() { return true; }
};

// A verified raw file served straight from its partition's mapping (see Image::MapRawFile).
std::unique_ptr<FileBytes> WrapPartitionMapping(const Image::Mapping& m, uint64_t size);

// Storage for `size` decoded bytes: the heap for small files; a memfd mapping for files of
// kMemfdThreshold bytes or more (so OpenFd can reopen it instead of copying), or anonymous memory if
// no memfd can be had. `internal_fd_hook` (may be null) is told about a memfd the storage keeps.
inline constexpr uint64_t kMemfdThreshold = 64 * 1024;
std::unique_ptr<DecodedBytes> AllocateFileBytes(uint64_t size, char** writable, void (*internal_fd_hook)(int));

}  // namespace fanstore
