// The one owned byte buffer of the client (decoded chunks and whole files from Client::Load), and the pool that
// recycles chunk-sized buffers: a fresh 1 MiB buffer per chunk costs 256 page faults and zeroing in the kernel,
// about a third of a sequential read's CPU time before buffers were reused.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "fanstore/client.hpp"

namespace fanstore {

class BufferPool;

// Heap bytes, written once through writable() by whoever decodes into them, then shared read-only.
class OwnedBytes final : public FileBytes {
 public:
  // Null when the memory cannot be had (the caller reports kNoMemory). `pool` (may be null) gets the buffer
  // back when the last reference goes.
  static std::shared_ptr<OwnedBytes> Allocate(uint64_t n, const std::shared_ptr<BufferPool>& pool = nullptr);
  ~OwnedBytes() override;
  const char* data() const override { return buf_.get(); }
  uint64_t size() const override { return n_; }
  char* writable() { return buf_.get(); }

 private:
  OwnedBytes(std::unique_ptr<char[]> p, uint64_t n, uint64_t capacity, std::shared_ptr<BufferPool> pool)
      : buf_(std::move(p)), n_(n), capacity_(capacity), pool_(std::move(pool)) {}
  std::unique_ptr<char[]> buf_;
  uint64_t n_, capacity_;
  std::shared_ptr<BufferPool> pool_;
};

// Spare buffers of exactly `capacity` bytes (the chunk size), at most `max_spare` of them.
class BufferPool {
 public:
  BufferPool(uint64_t capacity, size_t max_spare) : capacity_(capacity), max_spare_(max_spare) {}
  uint64_t capacity() const { return capacity_; }
  std::unique_ptr<char[]> Take() {
    std::lock_guard<std::mutex> lk(mu_);
    if (spare_.empty()) return nullptr;
    auto p = std::move(spare_.back());
    spare_.pop_back();
    return p;
  }
  void Give(std::unique_ptr<char[]> p) {
    std::lock_guard<std::mutex> lk(mu_);
    if (spare_.size() < max_spare_) spare_.push_back(std::move(p));
  }
  // fork: held across fork() by the forking thread (ClientCore::LockForFork).
  void LockForFork() { mu_.lock(); }
  void UnlockForFork() { mu_.unlock(); }

 private:
  const uint64_t capacity_;
  const size_t max_spare_;
  std::mutex mu_;
  std::vector<std::unique_ptr<char[]>> spare_;
};

inline std::shared_ptr<OwnedBytes> OwnedBytes::Allocate(uint64_t n, const std::shared_ptr<BufferPool>& pool) {
  const bool pooled = pool && n <= pool->capacity() && n * 2 > pool->capacity();
  const uint64_t capacity = pooled ? pool->capacity() : (n ? n : 1);
  std::unique_ptr<char[]> p = pooled ? pool->Take() : nullptr;
  if (!p) p.reset(new (std::nothrow) char[capacity]);
  if (!p) return nullptr;
  try {
    return std::shared_ptr<OwnedBytes>(new OwnedBytes(std::move(p), n, capacity, pooled ? pool : nullptr));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

inline OwnedBytes::~OwnedBytes() {
  if (pool_) pool_->Give(std::move(buf_));
}

}  // namespace fanstore
