// Freed blocks kept by size and handed out again, within the peak in use (recycling_memory.hpp).
#include "trainer/recycling_memory.hpp"

#include <algorithm>
#include <iterator>
#include <new>

namespace fanstore::trainer {

RecyclingMemory::RecyclingMemory(std::function<void*(std::size_t)> get, std::function<void(void*, std::size_t)> put)
    : get_(std::move(get)), put_(std::move(put)) {}

RecyclingMemory::~RecyclingMemory() { release_kept(); }

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

std::size_t RecyclingMemory::bytes_kept() const {
  std::lock_guard lock(mutex_);
  return kept_;
}

std::size_t RecyclingMemory::bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

std::size_t RecyclingMemory::peak_bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

void RecyclingMemory::release_kept() {
  std::vector<std::pair<void*, std::size_t>> out;
  {
    std::lock_guard lock(mutex_);
    for (auto& [bytes, size] : sizes_) {
      for (void* p : size.kept) out.emplace_back(p, bytes);
      size.obtained -= size.kept.size();
      size.kept.clear();
    }
    kept_ = 0;
    peak_ = in_use_;
  }
  for (auto [p, bytes] : out) put_(p, bytes);
}

std::vector<std::pair<void*, std::size_t>> RecyclingMemory::evict_for(std::size_t room) {
  std::vector<std::pair<void*, std::size_t>> out;
  const std::size_t limit = std::max(peak_, in_use_ + room);
  while (kept_ > 0 && in_use_ + kept_ + room > limit) {
    auto largest = std::prev(sizes_.end());
    while (largest->second.kept.empty()) --largest;  // kept_ > 0: one is not empty
    out.emplace_back(largest->second.kept.back(), largest->first);
    largest->second.kept.pop_back();
    --largest->second.obtained;
    kept_ -= largest->first;
  }
  return out;
}

void* RecyclingMemory::do_allocate(std::size_t bytes, std::size_t alignment) {
  if (alignment > 64) throw std::bad_alloc();  // upstream promises 64
  std::vector<std::pair<void*, std::size_t>> evicted;
  std::size_t old_peak = 0;
  {
    std::lock_guard lock(mutex_);
    // The smallest kept block of this size or up to a quarter larger (most hits are exact).
    auto fit = sizes_.lower_bound(bytes);
    while (fit != sizes_.end() && fit->first - bytes <= bytes / 4 && fit->second.kept.empty()) ++fit;
    if (fit != sizes_.end() && fit->first - bytes > bytes / 4) fit = sizes_.end();
    if (fit != sizes_.end()) {
      void* p = fit->second.kept.back();
      if (fit->first != bytes) larger_.emplace(p, fit->first);  // before any change: emplace may throw
      fit->second.kept.pop_back();
      kept_ -= fit->first;
      in_use_ += fit->first;
      peak_ = std::max(peak_, in_use_);
      return p;
    }
    evicted = evict_for(bytes);
    // Counted in use before the lock goes: a block freed while this one is obtained must not be kept
    // beyond the peak, or a later free gives a block back that the next step obtains again.
    in_use_ += bytes;
    old_peak = peak_;
    peak_ = std::max(peak_, in_use_);
  }
  for (auto [p, size] : evicted) put_(p, size);
  void* p = nullptr;
  try {
    p = get_(bytes);  // outside the lock: pinning a large block takes milliseconds
    std::lock_guard lock(mutex_);
    Size& size = sizes_[bytes];
    size.kept.reserve(size.obtained + 1);
    ++size.obtained;
    ++obtained_;
  } catch (...) {
    if (p) put_(p, bytes);
    std::lock_guard lock(mutex_);
    if (peak_ == in_use_ && peak_ > old_peak) peak_ = std::max(old_peak, in_use_ - bytes);  // it never happened
    in_use_ -= bytes;
    throw;
  }
  return p;
}

void RecyclingMemory::do_deallocate(void* p, std::size_t asked, std::size_t) {
  std::size_t bytes = asked;
  {
    std::lock_guard lock(mutex_);
    if (auto it = larger_.find(p); it != larger_.end()) {
      bytes = it->second;
      larger_.erase(it);
    }
    in_use_ -= bytes;
    Size& size = sizes_[bytes];
    if (in_use_ + kept_ + bytes <= peak_) {
      size.kept.push_back(p);  // within the room reserved when it was obtained
      kept_ += bytes;
      return;
    }
    --size.obtained;
  }
  put_(p, bytes);
}

}  // namespace fanstore::trainer
