// SlabBlock: size classes 4 KiB .. 2 MiB from huge-page chunks, free lists per class; bigger blocks are mappings
// of their own (huge pages too), unmapped when freed.
#include "slab.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <vector>

namespace fanstore::daemon {
namespace {

constexpr uint64_t kChunk = 2u << 20;
constexpr int kMinShift = 12, kMaxShift = 21;

// An aligned mapping of `n` bytes (a multiple of kChunk) that asks for huge pages.
char* MapHuge(uint64_t n) {
  void* p = mmap(nullptr, n + kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kChunk - 1) & ~(kChunk - 1);
  uintptr_t lead = a - reinterpret_cast<uintptr_t>(p);
  if (lead) munmap(p, lead);
  if (kChunk - lead) munmap(reinterpret_cast<char*>(a) + n, kChunk - lead);
  madvise(reinterpret_cast<void*>(a), n, MADV_HUGEPAGE);
  return reinterpret_cast<char*>(a);
}

struct Classes {
  std::vector<char*> free[kMaxShift + 1];
};
Classes& Pools() {
  static Classes* c = new Classes;  // never destroyed: blocks may be freed during static destruction
  return *c;
}

int ShiftFor(uint64_t n) {
  int s = kMinShift;
  while ((1ull << s) < n) ++s;
  return s;
}

}  // namespace

SlabBlock SlabBlock::Allocate(uint64_t n) {
  if (n == 0) n = 1;
  if (n > kChunk) {
    uint64_t cap = (n + kChunk - 1) & ~(kChunk - 1);
    char* p = MapHuge(cap);
    return p ? SlabBlock(p, cap) : SlabBlock();
  }
  int s = ShiftFor(n);
  auto& fl = Pools().free[s];
  if (fl.empty()) {
    char* chunk = MapHuge(kChunk);
    if (!chunk) return SlabBlock();
    for (uint64_t off = 0; off < kChunk; off += 1ull << s) fl.push_back(chunk + off);
  }
  char* p = fl.back();
  fl.pop_back();
  return SlabBlock(p, 1ull << s);
}

void SlabBlock::Release() {
  if (!p_) return;
  if (cap_ > kChunk) munmap(p_, cap_);
  else Pools().free[ShiftFor(cap_)].push_back(p_);
  p_ = nullptr;
  cap_ = 0;
}

}  // namespace fanstore::daemon
