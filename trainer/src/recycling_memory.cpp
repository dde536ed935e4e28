// Freed blocks kept by size and handed out again (recycling_memory.hpp).
#include "trainer/recycling_memory.hpp"

#include <new>

namespace fanstore::trainer {

RecyclingMemory::RecyclingMemory(std::function<void*(std::size_t)> get, std::function<void(void*, std::size_t)> put)
    : get_(std::move(get)), put_(std::move(put)) {}

RecyclingMemory::~RecyclingMemory() {
  for (auto& [bytes, blocks] : kept_)
    for (void* p : blocks) put_(p, bytes);
}

std::size_t RecyclingMemory::blocks_obtained() const {
  std::lock_guard lock(mutex_);
  return obtained_;
}

std::size_t RecyclingMemory::blocks_kept() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [bytes, blocks] : kept_) n += blocks.size();
  return n;
}

void* RecyclingMemory::do_allocate(std::size_t bytes, std::size_t alignment) {
  if (alignment > 64) throw std::bad_alloc();  // upstream promises 64
  {
    std::lock_guard lock(mutex_);
    auto it = kept_.find(bytes);
    if (it != kept_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
  }
  void* p = get_(bytes);  // outside the lock: pinning a large block takes milliseconds
  std::lock_guard lock(mutex_);
  ++obtained_;
  return p;
}

void RecyclingMemory::do_deallocate(void* p, std::size_t bytes, std::size_t) {
  std::lock_guard lock(mutex_);
  kept_[bytes].push_back(p);
}

}  // namespace fanstore::trainer
