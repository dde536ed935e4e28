// The process-wide "async I/O in use" switch that makes opens eager, and materialization before submission.
#include "async_io.hpp"

#include <errno.h>

#include <atomic>

#include "lazy.hpp"

namespace fanstore::interpose::async_io {
namespace {
std::atomic<bool> g_eager{false};
}  // namespace

void Enter() {
  if (g_eager.load(std::memory_order_acquire)) return;
  g_eager.store(true, std::memory_order_seq_cst);
  // Pairs with the fence in OpenEntry after a lazy fd is installed: either that open sees the flag and
  // materializes its own fd, or this scan sees the fd.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  lazy::MaterializeAll(false);
}

bool Eager() { return g_eager.load(std::memory_order_acquire); }

int BeforeSubmit(int fd) {
  if (!lazy::Is(fd)) return 0;
  return lazy::Materialize(fd);
}

}  // namespace fanstore::interpose::async_io
