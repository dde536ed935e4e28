// The one owned byte buffer of the client: decoded chunks and whole files (Client::Load) alike.
#pragma once

#include <cstdint>
#include <memory>
#include <new>

#include "fanstore/client.hpp"

namespace fanstore {

// Heap bytes, written once through writable() by whoever decodes into them, then shared read-only.
// Large buffers come from mmap inside the allocator, so freeing one returns its memory at once.
class OwnedBytes final : public FileBytes {
 public:
  // Null when the memory cannot be had (the caller reports kNoMemory).
  static std::shared_ptr<OwnedBytes> Allocate(uint64_t n) {
    std::unique_ptr<char[]> p(new (std::nothrow) char[n ? n : 1]);
    if (!p) return nullptr;
    try {
      return std::shared_ptr<OwnedBytes>(new OwnedBytes(std::move(p), n));
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  const char* data() const override { return buf_.get(); }
  uint64_t size() const override { return n_; }
  char* writable() { return buf_.get(); }

 private:
  OwnedBytes(std::unique_ptr<char[]> p, uint64_t n) : buf_(std::move(p)), n_(n) {}
  std::unique_ptr<char[]> buf_;
  uint64_t n_;
};

}  // namespace fanstore
