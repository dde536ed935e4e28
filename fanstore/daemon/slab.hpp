// Memory for the fetch cache and the fetches that land in it: power-of-two blocks carved from 2 MiB chunks that
// ask for transparent huge pages, kept for reuse. A fetched range then costs no page faults once the cache is
// warm, and one fault per 2 MiB while it fills (4 KiB pages cost one per 4 KiB: ~70 us per 128 KiB on a VM).
// Single-threaded (the daemon's progress thread).
#pragma once

#include <cstdint>
#include <utility>

namespace fanstore::daemon {

class SlabBlock {
 public:
  SlabBlock() = default;
  // At least n bytes (n > 0); empty (data() null) when no memory could be had.
  static SlabBlock Allocate(uint64_t n);
  SlabBlock(SlabBlock&& o) noexcept : p_(std::exchange(o.p_, nullptr)), cap_(std::exchange(o.cap_, 0)) {}
  SlabBlock& operator=(SlabBlock&& o) noexcept {
    if (this != &o) {
      Release();
      p_ = std::exchange(o.p_, nullptr);
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  SlabBlock(const SlabBlock&) = delete;
  SlabBlock& operator=(const SlabBlock&) = delete;
  ~SlabBlock() { Release(); }

  char* data() const { return p_; }
  uint64_t capacity() const { return cap_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  SlabBlock(char* p, uint64_t cap) : p_(p), cap_(cap) {}
  void Release();
  char* p_ = nullptr;
  uint64_t cap_ = 0;
};

}  // namespace fanstore::daemon
