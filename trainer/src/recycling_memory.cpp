// Freed blocks kept by size and handed out again (recycling_memory.hpp).
#include "trainer/recycling_memory.hpp"

#include <new>

namespace fanstore::trainer {

RecyclingMemory::RecyclingMemory(std::function<void*(std::size_t)> get, std::function<void(void*, std::size_t)> put)
    : get_(std::move(get)), put_(std::move(put)) {}

RecyclingMemory::~RecyclingMemory() {
  for (auto& [bytes, size] : sizes_)
    for (void* p : size.kept) put_(p, bytes);
}

std::size_t RecyclingMemory::blocks_obtained() const {
  std::lock_guard lock(mutex_);
  return obtained_;
}

std::size_t RecyclingMemory::blocks_kept() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [bytes, size] : sizes_) n += size.kept.size();
  return n;
}

void* RecyclingMemory::do_allocate(std::size_t bytes, std::size_t alignment) {
  if (alignment > 64) throw std::bad_alloc();  // upstream promises 64
  {
    std::lock_guard lock(mutex_);
    auto it = sizes_.find(bytes);
    if (it != sizes_.end() && !it->second.kept.empty()) {
      void* p = it->second.kept.back();
      it->second.kept.pop_back();
      return p;
    }
  }
  void* p = get_(bytes);  // outside the lock: pinning a large block takes milliseconds
  try {
    std::lock_guard lock(mutex_);
    Size& size = sizes_[bytes];
    size.kept.reserve(size.obtained + 1);
    ++size.obtained;
    ++obtained_;
  } catch (...) {
    put_(p, bytes);
    throw;
  }
  return p;
}

void RecyclingMemory::do_deallocate(void* p, std::size_t bytes, std::size_t) {
  std::lock_guard lock(mutex_);
  sizes_[bytes].kept.push_back(p);  // within the room reserved when it was obtained
}

}  // namespace fanstore::trainer
