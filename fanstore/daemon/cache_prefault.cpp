#include "cache_prefault.hpp"

#include <algorithm>
#include <chrono>
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

CachePrefault::CachePrefault(const SharedArena* arena, uint64_t bytes)
    : arena_(arena), want_(std::min(bytes, arena->data_len())) {
  th_ = std::thread([this] { Run(); });
}

CachePrefault::~CachePrefault() {
  Stop();
  if (th_.joinable()) th_.join();
}

void CachePrefault::Run() {
  // Steps of 2 MiB: a stop (a termination signal, a failed staging) is seen within a millisecond or so.
  constexpr uint64_t kStep = 2u << 20;
  auto t0 = std::chrono::steady_clock::now();
  while (done_ < want_ && !stop_.load(std::memory_order_relaxed)) {
    uint64_t n = std::min(want_ - done_, kStep);
    status_ = arena_->Prefault(done_, n);
    if (!status_.ok()) break;
    done_ += n;
  }
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  finished_.store(true, std::memory_order_release);
}

Status CachePrefault::Wait(uint64_t* done_bytes, double* seconds) {
  if (th_.joinable()) th_.join();
  if (done_bytes) *done_bytes = done_;
  if (seconds) *seconds = seconds_;
  return status_;
}

}  // namespace fanstore::daemon
