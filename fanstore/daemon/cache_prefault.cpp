#include "cache_prefault.hpp"

#include <algorithm>
#include <cstdio>

namespace fanstore::daemon {

uint64_t PrefaultBudget(uint64_t cache_bytes, const char* meminfo) {
  FILE* f = std::fopen(meminfo, "re");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
  std::fclose(f);
  if (!found) return 0;
  return std::min<uint64_t>(cache_bytes, static_cast<uint64_t>(kib) * 1024 / 2);
}

Status PrefaultCache(const SharedArena& arena, uint64_t bytes, const std::function<bool()>& stop, uint64_t* done) {
  constexpr uint64_t kStep = 2u << 20;
  const uint64_t want = std::min(bytes, arena.data_len());
  for (*done = 0; *done < want && !stop();) {
    uint64_t n = std::min(want - *done, kStep);
    if (Status st = arena.Prefault(*done, n); !st.ok()) return st;
    *done += n;
  }
  return Status::Ok();
}

}  // namespace fanstore::daemon
