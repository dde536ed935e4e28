#include "shared_arena.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "fanstore/protocol/fetch_cache_view.hpp"
#include "fanstore/protocol/payload_memfd.hpp"
#include "fanstore/protocol/range_check.hpp"

namespace fanstore::daemon {
namespace {

namespace sc = fetch_cache_view;
constexpr uint64_t kChunk = 2u << 20;
constexpr int kMinShift = 12, kClasses = 10;  // 4 KiB .. 2 MiB
constexpr int kRun = kClasses;

int ClassFor(uint64_t n) {
  int c = 0;
  while ((uint64_t{1} << (kMinShift + c)) < n) ++c;
  return c;
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

}  // namespace

char* ArenaBlock::data() const { return arena_ ? arena_->data_ + off_ : nullptr; }

void ArenaBlock::Release() {
  if (arena_) arena_->Free(off_, cap_);
  arena_ = nullptr;
  cap_ = 0;
}

std::unique_ptr<SharedArena> SharedArena::Create(uint64_t data_bytes, Status* why) {
  std::unique_ptr<SharedArena> a(new SharedArena);
  a->data_len_ = RoundUp(data_bytes ? data_bytes : 1, kChunk);
  // Two slots per smallest possible entry would be wasteful; one per 16 KiB of data, at least 4096, leaves the
  // probe windows mostly empty for typical files (tens of KiB and up).
  uint64_t want = a->data_len_ / (16 << 10);
  uint32_t n = 4096;
  while (n < want && n < (1u << 26)) n <<= 1;
  a->nslots_ = n;
  uint64_t slots_off = 4096;
  uint64_t hits_off = RoundUp(slots_off + uint64_t{n} * sizeof(sc::Slot), 4096);
  uint64_t data_off = RoundUp(hits_off + uint64_t{n} * 4, kChunk);
  a->size_ = data_off + a->data_len_;
  void* map = nullptr;
  Status s = daemon_proto::CreatePayloadMemfd(a->size_, &a->fd_, &map);
  if (!s.ok()) {
    if (why) *why = s;
    return nullptr;
  }
  a->base_ = static_cast<char*>(map);
  a->data_ = a->base_ + data_off;
  a->slots_ = a->base_ + slots_off;
  a->hits_ = a->base_ + hits_off;
  sc::Header h{sc::kMagic, sc::kVersion, n,        static_cast<uint32_t>(sizeof(sc::Slot)),
               slots_off,  hits_off,     data_off, a->data_len_};
  std::memcpy(a->base_, &h, sizeof h);  // slots and hits start zeroed: empty
  a->chunks_.resize(a->data_len_ / kChunk);
  for (uint32_t c = 0; c < a->chunks_.size(); ++c) a->free_chunks_.insert(c);
  return a;
}

SharedArena::~SharedArena() {
  if (base_) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

Status SharedArena::Prefault(uint64_t off, uint64_t len) const {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif
  if (!RangeWithin(off, len, data_len_)) return Status(Code::kInvalidArgument, "prefault past the cache's end");
  // Writable in this process's page tables too, as a write fault would leave them (no byte is written).
  if (madvise(data_ + off, len, MADV_POPULATE_WRITE) == 0) return Status::Ok();
  if (errno != EINVAL) return Status::FromErrno(errno, "faulting in the fetch cache (madvise)");
  // A kernel older than 5.14: allocate the memfd's pages (existing ones are left as they are).
  if (fallocate(fd_, 0, static_cast<off_t>(data_ - base_ + off), static_cast<off_t>(len)) == 0) return Status::Ok();
  return Status::FromErrno(errno, "faulting in the fetch cache (fallocate)");
}

ArenaBlock SharedArena::Allocate(uint64_t n) {
  if (n > data_len_) return ArenaBlock();  // (also keeps the rounding below from wrapping)
  if (n == 0) n = 1;
  if (n > kChunk) {
    // A run of whole chunks: first fit.
    uint32_t need = static_cast<uint32_t>(RoundUp(n, kChunk) / kChunk), len = 0;
    for (uint32_t c = 0; c < chunks_.size(); ++c) {
      len = chunks_[c].cls == -1 ? len + 1 : 0;
      if (len < need) continue;
      uint32_t head = c + 1 - need;
      for (uint32_t k = head; k <= c; ++k) {
        chunks_[k].cls = kRun;
        free_chunks_.erase(k);
      }
      chunks_[head].run = need;
      return ArenaBlock(this, uint64_t{head} * kChunk, uint64_t{need} * kChunk);
    }
    return ArenaBlock();
  }
  int cls = ClassFor(n);
  uint64_t bs = uint64_t{1} << (kMinShift + cls);
  if (partial_[cls].empty()) {
    if (free_chunks_.empty()) return ArenaBlock();
    uint32_t c = *free_chunks_.begin();
    free_chunks_.erase(free_chunks_.begin());
    Chunk& ch = chunks_[c];  // free: nothing used, no free slots listed
    ch.cls = cls;
    for (uint32_t i = static_cast<uint32_t>(kChunk / bs); i-- > 0;) ch.free_slots.push_back(static_cast<uint16_t>(i));
    partial_[cls].insert(c);
  }
  uint32_t c = *partial_[cls].begin();
  Chunk& ch = chunks_[c];
  uint16_t slot = ch.free_slots.back();
  ch.free_slots.pop_back();
  ++ch.used;
  if (ch.free_slots.empty()) partial_[cls].erase(c);
  return ArenaBlock(this, uint64_t{c} * kChunk + uint64_t{slot} * bs, bs);
}

void SharedArena::Free(uint64_t off, uint64_t cap) {
  uint32_t c = static_cast<uint32_t>(off / kChunk);
  Chunk& ch = chunks_[c];
  if (ch.cls == kRun) {
    for (uint32_t k = c; k < c + ch.run; ++k) {
      chunks_[k].cls = -1;
      free_chunks_.insert(k);
    }
    ch.run = 0;
    return;
  }
  bool was_full = ch.free_slots.empty();
  ch.free_slots.push_back(static_cast<uint16_t>((off % kChunk) / cap));
  if (--ch.used == 0) {
    // Wholly free: back to the pool of chunks any class (or a run) can take.
    partial_[ch.cls].erase(c);
    ch.cls = -1;
    ch.free_slots.clear();
    ch.free_slots.shrink_to_fit();
    free_chunks_.insert(c);
  } else if (was_full) {
    partial_[ch.cls].insert(c);
  }
}

int SharedArena::Publish(uint32_t part, uint64_t offset, uint64_t length, const char* data) {
  auto* slots = static_cast<sc::Slot*>(slots_);
  uint64_t h = sc::SlotHash(part, offset), mask = nslots_ - 1;
  for (uint32_t i = 0; i < sc::kMaxProbe; ++i) {
    uint64_t at = (h + i) & mask;
    sc::Slot& s = slots[at];
    if (s.length.load(std::memory_order_relaxed) != 0) continue;
    uint32_t v = s.seq.load(std::memory_order_relaxed);
    s.seq.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.part.store(part, std::memory_order_relaxed);
    s.offset.store(offset, std::memory_order_relaxed);
    s.data_off.store(static_cast<uint64_t>(data - data_), std::memory_order_relaxed);
    s.length.store(length, std::memory_order_relaxed);
    static_cast<std::atomic<uint32_t>*>(hits_)[at].store(0, std::memory_order_relaxed);
    s.seq.store(v + 2, std::memory_order_release);  // the bytes and the fields, then "stable"
    return static_cast<int>(at);
  }
  return -1;
}

void SharedArena::Withdraw(int slot) {
  if (slot < 0) return;
  sc::Slot& s = static_cast<sc::Slot*>(slots_)[slot];
  uint32_t v = s.seq.load(std::memory_order_relaxed);
  s.seq.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.length.store(0, std::memory_order_relaxed);
  s.seq.store(v + 2, std::memory_order_release);
}

uint32_t SharedArena::Hits(int slot) const {
  if (slot < 0) return 0;
  return static_cast<std::atomic<uint32_t>*>(hits_)[slot].load(std::memory_order_relaxed);
}

}  // namespace fanstore::daemon
