// The fetch cache as the clients see it: one memfd the daemon shares with every client of the node (docs/daemon.md,
// "The fetch cache"), holding an index of cached byte ranges and their bytes. A client looks a range up and copies it
// out with no daemon round-trip; a seqlock per index slot tells it whether the daemon changed the slot (evicted the
// range, reused its memory) while it copied, and then it asks the daemon instead. The client checks everything it
// reads (bounds; the bytes are checksummed after decoding anyway), so a corrupt cache is a miss, never wrong data.
// MPI-free: the daemon writes it (fanstore/daemon/shared_arena.cpp), clients read it (daemon_client.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "fanstore/protocol/range_check.hpp"

namespace fanstore::fetch_cache_view {

// Layout, all little-endian, offsets from the start of the memfd:
//   0 Header (4 KiB page) | slots: nslots * 32 B | hits: nslots * 4 B (clients add 1 per hit) | data area
inline constexpr uint32_t kMagic = 0x434E5346;  // "FSNC"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMaxProbe = 16;  // a range lives in one of the 16 slots after its hash

struct Header {
  uint32_t magic, version, nslots, slot_bytes;
  uint64_t slots_off, hits_off, data_off, data_len;
};

// seq is odd while the daemon rewrites the slot; length 0 marks an empty slot. data_off is relative to the data area.
struct Slot {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> part;
  std::atomic<uint64_t> offset;
  std::atomic<uint64_t> length;
  std::atomic<uint64_t> data_off;
};
static_assert(sizeof(Slot) == 32, "the slot layout is part of the protocol");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "slots are shared between processes");

inline uint64_t SlotHash(uint32_t part, uint64_t offset) {
  uint64_t h = (offset ^ (static_cast<uint64_t>(part) << 48)) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 31);
}

// A client's read-only view (plus the hit counters) of the shared cache memfd.
class View {
 public:
  // Checks the header against the mapping's size; false: not a usable cache (the client then never uses it).
  // `hits` (optional): a separate writable mapping of the hit counters when `base` is mapped read-only.
  bool Attach(char* base, uint64_t size, char* hits = nullptr) {
    Header h;
    if (!ReadHeader(base, size, &h)) return false;
    slots_ = reinterpret_cast<Slot*>(base + h.slots_off);
    hits_ = reinterpret_cast<std::atomic<uint32_t>*>(hits ? hits : base + h.hits_off);
    data_ = base + h.data_off;
    data_off_ = h.data_off;
    data_len_ = h.data_len;
    mask_ = h.nslots - 1;
    return true;
  }
  bool attached() const { return slots_ != nullptr; }
  // Where the hit counters are and how long (to map them writable): false when `base` is not a cache.
  static bool HitsRange(const char* base, uint64_t size, uint64_t* off, uint64_t* len) {
    Header h;
    if (!ReadHeader(base, size, &h) || h.hits_off % 4096 != 0) return false;
    *off = h.hits_off;
    *len = uint64_t{h.nslots} * 4;
    return true;
  }

  // Copies the cached bytes [offset, offset + length) of `part` into dst; false when they are not cached whole,
  // or changed while being copied.
  bool Copy(uint32_t part, uint64_t offset, uint64_t length, char* dst) const {
    return CopyWith(part, offset, length, [&](uint64_t d) {
      std::memcpy(dst, data_ + d, length);
      return true;
    });
  }
  // As Copy, with `copy(d)` doing the copy of the bytes at data-area offset d (data_offset() + d in the memfd):
  // a client may pread them from the memfd instead of touching the mapping. `copy` returns false when it failed.
  template <typename CopyFn>
  bool CopyWith(uint32_t part, uint64_t offset, uint64_t length, const CopyFn& copy) const {
    if (!slots_ || length == 0) return false;
    uint64_t h = SlotHash(part, offset);
    for (uint32_t i = 0; i < kMaxProbe; ++i) {
      uint64_t at = (h + i) & mask_;
      Slot& s = slots_[at];
      uint32_t v1 = s.seq.load(std::memory_order_acquire);
      if (v1 & 1) continue;
      if (s.length.load(std::memory_order_relaxed) != length || s.offset.load(std::memory_order_relaxed) != offset ||
          s.part.load(std::memory_order_relaxed) != part)
        continue;
      uint64_t d = s.data_off.load(std::memory_order_relaxed);
      if (d > data_len_ || length > data_len_ - d) return false;
      if (!copy(d)) return false;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.seq.load(std::memory_order_relaxed) != v1) return false;
      hits_[at].fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    return false;
  }
  uint64_t data_offset() const { return data_off_; }

 private:
  // The header at `base`, if it is a cache of this layout whose parts all lie within the mapping's `size`.
  static bool ReadHeader(const char* base, uint64_t size, Header* h) {
    if (size < 4096) return false;
    std::memcpy(h, base, sizeof *h);
    return h->magic == kMagic && h->version == kVersion && h->slot_bytes == sizeof(Slot) && h->nslots != 0 &&
           (h->nslots & (h->nslots - 1)) == 0 && RangeWithin(h->slots_off, uint64_t{h->nslots} * sizeof(Slot), size) &&
           RangeWithin(h->hits_off, uint64_t{h->nslots} * 4, size) && RangeWithin(h->data_off, h->data_len, size) &&
           h->slots_off % 8 == 0 && h->hits_off % 4 == 0;
  }

  Slot* slots_ = nullptr;
  std::atomic<uint32_t>* hits_ = nullptr;
  const char* data_ = nullptr;
  uint64_t data_off_ = 0;
  uint64_t data_len_ = 0;
  uint64_t mask_ = 0;
};

}  // namespace fanstore::fetch_cache_view
