// The daemon's side of the shared fetch cache (fanstore/protocol/include/fanstore/protocol/fetch_cache_view.hpp): the
// memfd every client maps, the allocator of its data area (power-of-two blocks of 4 KiB .. 2 MiB carved from 2 MiB
// chunks, runs of whole chunks beyond), and the index writer (publish a cached range for clients; withdraw it before
// its memory is reused). Single-threaded (the daemon's progress thread).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore::daemon {

class SharedArena;

// A block of the data area; returned to the arena when destroyed.
class ArenaBlock {
 public:
  ArenaBlock() = default;
  ArenaBlock(ArenaBlock&& o) noexcept { *this = std::move(o); }
  ArenaBlock& operator=(ArenaBlock&& o) noexcept {
    if (this != &o) {
      Release();
      arena_ = std::exchange(o.arena_, nullptr);
      off_ = o.off_;
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  ~ArenaBlock() { Release(); }
  explicit operator bool() const { return arena_ != nullptr; }
  char* data() const;
  uint64_t capacity() const { return cap_; }

 private:
  friend class SharedArena;
  ArenaBlock(SharedArena* a, uint64_t off, uint64_t cap) : arena_(a), off_(off), cap_(cap) {}
  void Release();
  SharedArena* arena_ = nullptr;
  uint64_t off_ = 0, cap_ = 0;
};

class SharedArena {
 public:
  // A memfd with room for `data_bytes` of cached ranges (rounded up to 2 MiB) and their index.
  static std::unique_ptr<SharedArena> Create(uint64_t data_bytes, Status* why);
  ~SharedArena();

  int fd() const { return fd_; }  // passed to clients
  uint64_t data_len() const { return data_len_; }

  // Faults in [off, off + len) of the data area (allocates and maps its pages) without changing a byte of it: any
  // thread, while the arena is in use.
  Status Prefault(uint64_t off, uint64_t len) const;

  // At least n bytes; empty when no free block of that size exists right now.
  ArenaBlock Allocate(uint64_t n);

  // Makes `length` bytes at `data` (inside a block) visible to clients as [offset, offset + length) of `part`.
  // Returns the slot used, or -1 when the range's probe window is full (it is then served through the socket only).
  int Publish(uint32_t part, uint64_t offset, uint64_t length, const char* data);
  // Withdraws a published range; after this no client can complete a copy of it, and its memory may be reused.
  void Withdraw(int slot);
  // Client hits counted on `slot` so far.
  uint32_t Hits(int slot) const;

 private:
  friend class ArenaBlock;
  SharedArena() = default;
  void Free(uint64_t off, uint64_t cap);

  struct Chunk {
    int cls = -1;      // -1 free; 0..9: blocks of 4 KiB << cls; 10: part of a multi-chunk run
    uint32_t run = 0;  // for the head of a run: chunks in it
    uint32_t used = 0;
    std::vector<uint16_t> free_slots;
  };
  int fd_ = -1;
  char* base_ = nullptr;
  uint64_t size_ = 0;
  char* data_ = nullptr;
  uint64_t data_len_ = 0;
  void* slots_ = nullptr;
  void* hits_ = nullptr;
  uint32_t nslots_ = 0;
  std::vector<Chunk> chunks_;
  std::set<uint32_t> free_chunks_;
  std::set<uint32_t> partial_[10];  // chunks of a class with a free block
};

}  // namespace fanstore::daemon
