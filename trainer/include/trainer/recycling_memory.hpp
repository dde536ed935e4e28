// A memory resource that keeps the blocks it is given back and hands them out again for requests of
// the same size: the training loop's batches are one size, so after the first few every batch reuses
// a block. It exists for memory that is slow to get and to give back (page-locked host memory:
// cudaHostAlloc maps and pins every page, cudaFreeHost waits for the whole device); nothing is
// returned upstream before the resource is destroyed. Thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <memory_resource>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace fanstore::trainer {

class RecyclingMemory final : public std::pmr::memory_resource {
 public:
  // `get(bytes)` returns memory aligned to at least 64 bytes, or throws; `put(p, bytes)` releases it.
  RecyclingMemory(std::function<void*(std::size_t)> get, std::function<void(void*, std::size_t)> put);
  ~RecyclingMemory() override;
  RecyclingMemory(const RecyclingMemory&) = delete;
  RecyclingMemory& operator=(const RecyclingMemory&) = delete;

  // Blocks obtained upstream so far, and those kept for reuse now.
  std::size_t blocks_obtained() const;
  std::size_t blocks_kept() const;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  std::function<void*(std::size_t)> get_;
  std::function<void(void*, std::size_t)> put_;
  struct Size {
    std::vector<void*> kept;  // room for every block of this size obtained: giving one back never allocates
    std::size_t obtained = 0;
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, Size> sizes_;
  std::size_t obtained_ = 0;
};

}  // namespace fanstore::trainer
