// `fanstore serve --cache-prefault`: the fetch cache's memory faulted in on a thread of its own while the partitions
// are staged, rather than a page fault per 4 KiB on the progress thread while the first epoch's readers wait. Not
// the default: it takes the memory whether the job needs it or not (docs/daemon.md, "The fetch cache").
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "fanstore/status.hpp"
#include "shared_arena.hpp"

namespace fanstore::daemon {

// How much of a cache of `cache_bytes` to fault in up front: all of it, but no more than half of the memory the
// kernel reports available (MemAvailable in `meminfo`), so that a cache sized for the worst case does not take the
// node's memory before it is needed. 0 when `meminfo` cannot be read.
uint64_t PrefaultBudget(uint64_t cache_bytes, const char* meminfo = "/proc/meminfo");

class CachePrefault {
 public:
  // Starts faulting in the first `bytes` of `arena`'s data area (rounded down to what it has) on a thread of its
  // own. `arena` must outlive this object.
  CachePrefault(const SharedArena* arena, uint64_t bytes);
  ~CachePrefault();  // stops at the next step and joins
  CachePrefault(const CachePrefault&) = delete;
  CachePrefault& operator=(const CachePrefault&) = delete;

  // Asks the thread to stop at its next step (a failed or cancelled staging).
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  // Whether the thread is done (Wait then returns at once).
  bool Finished() const { return finished_.load(std::memory_order_acquire); }
  // Waits for the thread (after Stop: within a step); the bytes faulted in, the seconds it took, and the error that
  // stopped it short of the whole (Ok when none did, a Stop included).
  Status Wait(uint64_t* done_bytes, double* seconds);

 private:
  void Run();

  const SharedArena* arena_;
  uint64_t want_;
  std::atomic<bool> stop_{false}, finished_{false};
  uint64_t done_ = 0;
  double seconds_ = 0;
  Status status_;
  std::thread th_;
};

}  // namespace fanstore::daemon
