// The fd -> entry table: a zero-initialised static array, so it needs no initialisation and works from the first call.
#include "fd_table.hpp"

namespace fanstore::interpose {

std::atomic<uint32_t> FdTable::slots_[FdTable::kCapacity];
std::atomic<int> FdTable::high_water_{0};

void FdTable::Raise(int fd) {
  int hw = high_water_.load(std::memory_order_relaxed);
  while (fd + 1 > hw && !high_water_.compare_exchange_weak(hw, fd + 1, std::memory_order_acq_rel)) {
  }
}

bool FdTable::Track(int fd, uint32_t id) {
  if (fd < 0 || fd >= kCapacity || id >= kAncestorBase - 1) return false;
  Raise(fd);
  slots_[fd].store(id + 1, std::memory_order_release);
  return true;
}

void FdTable::MarkInternal(int fd) {
  if (fd < 0 || fd >= kCapacity) return;
  Raise(fd);
  slots_[fd].store(kInternal, std::memory_order_release);
}

void FdTable::MarkAncestor(int fd, int depth) {
  if (fd < 0 || fd >= kCapacity || depth < 0 || depth > kMaxAncestorDepth) return;
  Raise(fd);
  slots_[fd].store(kAncestorBase + static_cast<uint32_t>(depth), std::memory_order_release);
}

void FdTable::Copy(int from, int to) {
  if (to < 0 || to >= kCapacity) return;
  uint32_t raw = Raw(from);
  if (raw == 0) {
    Clear(to);
    return;
  }
  Raise(to);
  slots_[to].store(raw, std::memory_order_release);
}

}  // namespace fanstore::interpose
