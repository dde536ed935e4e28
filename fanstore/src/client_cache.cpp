// Decoded-file storage and its LRU cache (see decoded_cache.hpp).
#include <sys/mman.h>

#include <new>

#include "decoded_cache.hpp"

namespace fanstore {
namespace {

class HeapBytes final : public FileBytes {
 public:
  explicit HeapBytes(uint64_t n) : buf_(n ? new char[n] : nullptr), n_(n) {}
  const char* data() const override { return buf_.get(); }
  uint64_t size() const override { return n_; }
  char* writable() { return buf_.get(); }

 private:
  std::unique_ptr<char[]> buf_;
  uint64_t n_;
};

// Large files get their own mapping so freeing them returns memory to the OS at once.
class MappedBytes final : public FileBytes {
 public:
  MappedBytes(void* p, uint64_t n) : p_(p), n_(n) {}
  ~MappedBytes() override { munmap(p_, n_); }
  const char* data() const override { return static_cast<const char*>(p_); }
  uint64_t size() const override { return n_; }

 private:
  void* p_;
  uint64_t n_;
};

constexpr uint64_t kMmapThreshold = 1ull << 20;

}  // namespace

std::unique_ptr<FileBytes> AllocateFileBytes(uint64_t size, char** writable) {
  if (size >= kMmapThreshold) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    *writable = static_cast<char*>(p);
    return std::make_unique<MappedBytes>(p, size);
  }
  auto h = std::unique_ptr<HeapBytes>(new (std::nothrow) HeapBytes(size));
  if (!h) return nullptr;
  *writable = h->writable();
  return h;
}

std::shared_ptr<const FileBytes> DecodedCache::Get(uint32_t id) {
  if (budget_ == 0) return nullptr;
  std::lock_guard<std::mutex> g(mu_);
  auto it = map_.find(id);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void DecodedCache::Put(uint32_t id, std::shared_ptr<const FileBytes> bytes) {
  uint64_t n = bytes->size();
  if (budget_ == 0 || n > budget_ / 8) return;
  std::lock_guard<std::mutex> g(mu_);
  if (map_.count(id)) return;
  lru_.emplace_front(id, std::move(bytes));
  map_[id] = lru_.begin();
  used_ += n;
  while (used_ > budget_ && !lru_.empty()) {
    auto& back = lru_.back();
    used_ -= back.second->size();
    map_.erase(back.first);
    lru_.pop_back();
  }
}

}  // namespace fanstore
