// A memory resource that keeps the blocks it is given back and hands them out again for requests of
// the same size, or of a size the block exceeds by at most a quarter: a training step allocates the same sizes every
// step, and memory from the system costs page faults on every page and a munmap when it goes (page-locked memory far
// more: cudaHostAlloc pins every page, cudaFreeHost waits for the whole device). Kept blocks never make the process
// bigger than it was: blocks are kept only while those in use and those kept together stay within the most ever in use
// at once, and kept ones go back to the system first when a new block would exceed that. Thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
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

  // Blocks obtained from `get` so far; blocks and bytes kept for reuse now; bytes in use now and the most at once.
  std::size_t blocks_obtained() const;
  std::size_t blocks_kept() const;
  std::size_t bytes_kept() const;
  std::size_t bytes_in_use() const;
  std::size_t peak_bytes_in_use() const;
  // Gives every kept block back (after a phase whose sizes will not come again), and forgets the peak.
  void release_kept();

 private:
  struct Size {
    std::vector<void*> kept;  // room for every block of this size obtained: giving one back never allocates
    std::size_t obtained = 0;
  };

  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
  // Takes kept blocks out (largest first) until `room` more bytes in use fit within the peak; under mutex_.
  std::vector<std::pair<void*, std::size_t>> evict_for(std::size_t room);

  std::function<void*(std::size_t)> get_;
  std::function<void(void*, std::size_t)> put_;
  mutable std::mutex mutex_;
  std::map<std::size_t, Size> sizes_;              // by size, for the best fit
  std::unordered_map<void*, std::size_t> larger_;  // blocks handed out for a smaller request: their size
  std::size_t obtained_ = 0, in_use_ = 0, kept_ = 0, peak_ = 0;
};

}  // namespace fanstore::trainer
