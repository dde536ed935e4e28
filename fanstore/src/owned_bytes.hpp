// The one owned byte buffer of the client (decoded chunks and whole files from Client::Load), and the pool that
// recycles chunk-sized buffers: a fresh 1 MiB buffer per chunk costs 256 page faults and zeroing in the kernel,
// about a third of a sequential read's CPU time before buffers were reused.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "fanstore/client.hpp"

namespace fanstore {

// Buffers of exactly `capacity` bytes (a chunk, or the largest stored form of one), mapped on their own so that
// a buffer given back beyond `max_spare` returns its memory to the system at once (malloc would keep it).
class BufferPool {
 public:
  BufferPool(uint64_t capacity, size_t max_spare) : capacity_(capacity), max_spare_(max_spare) {}
  ~BufferPool() {
    for (char* p : spare_) ::munmap(p, capacity_);
  }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  uint64_t capacity() const { return capacity_; }
  // A buffer of capacity() bytes, or null when no memory can be had.
  char* Take() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!spare_.empty()) {
        char* p = spare_.back();
        spare_.pop_back();
        return p;
      }
    }
    void* p = ::mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  void Give(char* p) {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (spare_.size() < max_spare_) {
        spare_.push_back(p);
        return;
      }
    }
    ::munmap(p, capacity_);
  }
  // fork: held across fork() by the forking thread (ClientCore::LockForFork).
  void LockForFork() { mu_.lock(); }
  void UnlockForFork() { mu_.unlock(); }

 private:
  const uint64_t capacity_;
  const size_t max_spare_;
  std::mutex mu_;
  std::vector<char*> spare_;
};

// A pooled buffer for one scope (scratch space); null inside when no memory could be had.
class PooledBuffer {
 public:
  explicit PooledBuffer(const std::shared_ptr<BufferPool>& pool) : pool_(pool), p_(pool->Take()) {}
  ~PooledBuffer() { pool_->Give(p_); }
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
  char* get() const { return p_; }

 private:
  std::shared_ptr<BufferPool> pool_;
  char* p_;
};

// Bytes written once through writable() by whoever decodes into them, then shared read-only.
class OwnedBytes final : public FileBytes {
 public:
  // Null when the memory cannot be had (the caller reports kNoMemory). Sizes that fit `pool`'s buffers (and use
  // more than half of one) come from it and go back to it when the last reference goes.
  static std::shared_ptr<OwnedBytes> Allocate(uint64_t n, const std::shared_ptr<BufferPool>& pool = nullptr) {
    const bool pooled = pool && n <= pool->capacity() && n * 2 > pool->capacity();
    char* p = pooled ? pool->Take() : new (std::nothrow) char[n ? n : 1];
    if (p == nullptr) return nullptr;
    try {
      return std::shared_ptr<OwnedBytes>(new OwnedBytes(p, n, pooled ? pool : nullptr));
    } catch (const std::bad_alloc&) {
      if (pooled) pool->Give(p);
      else delete[] p;
      return nullptr;
    }
  }
  ~OwnedBytes() override {
    if (pool_) pool_->Give(p_);
    else delete[] p_;
  }
  const char* data() const override { return p_; }
  uint64_t size() const override { return n_; }
  char* writable() { return p_; }

 private:
  OwnedBytes(char* p, uint64_t n, std::shared_ptr<BufferPool> pool) : p_(p), n_(n), pool_(std::move(pool)) {}
  char* p_;
  uint64_t n_;
  std::shared_ptr<BufferPool> pool_;
};

}  // namespace fanstore
