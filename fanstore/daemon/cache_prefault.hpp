// `fanstore serve --cache-prefault`: the fetch cache's memory faulted in before "ready", rather than a page fault
// per 4 KiB on the progress thread while the first epoch's readers wait (docs/daemon.md, "The fetch cache").
#pragma once

#include <cstdint>
#include <functional>

#include "fanstore/status.hpp"
#include "shared_arena.hpp"

namespace fanstore::daemon {

// How much of a cache of `cache_bytes` to fault in up front: all of it, but no more than half of the memory the
// kernel reports available (MemAvailable in `meminfo`), so that a cache sized for the worst case does not take the
// node's memory before it is needed. 0 when `meminfo` cannot be read.
uint64_t PrefaultBudget(uint64_t cache_bytes, const char* meminfo = "/proc/meminfo");

// Faults in the first `bytes` of `arena`'s data area (at most all of it) in steps of 2 MiB, until `stop()` is true
// between two steps (a termination signal: a big cache takes seconds). Cached bytes stay as they were. `*done`:
// the bytes faulted in.
Status PrefaultCache(const SharedArena& arena, uint64_t bytes, const std::function<bool()>& stop, uint64_t* done);

}  // namespace fanstore::daemon
