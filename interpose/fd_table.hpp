// fd -> image entry table for the real kernel fds the interposer hands out; lock-free, shared by all threads.
#pragma once

#include <atomic>
#include <cstdint>

namespace fanstore::interpose {

// A fixed array indexed by fd (zero pages until touched), so an fd opened on one thread is known on
// every other, and forked children inherit it with the fds. Values: 0 = not ours, kInternal = an fd the
// Client opened for itself (close_range/closefrom must spare it), kAncestorBase + d = a real directory
// fd of the program that names the mount's ancestor at depth d ("/" is depth 0: `openat(fd, "fanstore")`
// must reach the image), otherwise entry id + 1.
class FdTable {
 public:
  static constexpr int kCapacity = 1 << 20;
  static constexpr uint32_t kInternal = 0xFFFFFFFFu;
  static constexpr uint32_t kAncestorBase = 0xFFFFFF00u;
  static constexpr int kMaxAncestorDepth = 254;

  static uint32_t Raw(int fd) { return (fd >= 0 && fd < kCapacity) ? slots_[fd].load(std::memory_order_acquire) : 0; }
  static bool IsOurs(uint32_t raw) { return raw != 0 && raw < kAncestorBase; }
  static bool IsAncestor(uint32_t raw) { return raw >= kAncestorBase && raw != kInternal; }
  static int AncestorDepth(uint32_t raw) { return static_cast<int>(raw - kAncestorBase); }
  static uint32_t IdOf(uint32_t raw) { return raw - 1; }
  // Entry id of fd when it is one of ours; false otherwise.
  static bool Lookup(int fd, uint32_t* id) {
    uint32_t raw = Raw(fd);
    if (!IsOurs(raw)) return false;
    *id = IdOf(raw);
    return true;
  }
  // Records fd as serving entry `id` (< kAncestorBase - 1). False when fd is beyond the table (the caller
  // closes it: EMFILE).
  static bool Track(int fd, uint32_t id);
  static void MarkInternal(int fd);
  // Records a real directory fd as the mount's ancestor at `depth` (0..kMaxAncestorDepth).
  static void MarkAncestor(int fd, int depth);
  // Copies the tracking of `from` to `to` (dup): `to` becomes ours, internal or untracked like `from`.
  static void Copy(int from, int to);
  // Forgets fd (close). Cheap when fd was never ours: one load.
  static void Clear(int fd) {
    if (fd >= 0 && fd < kCapacity && slots_[fd].load(std::memory_order_relaxed) != 0)
      slots_[fd].store(0, std::memory_order_release);
  }
  // Highest fd ever tracked + 1: bounds the scans of close_range/closefrom/exec.
  static int HighWater() { return high_water_.load(std::memory_order_acquire); }

 private:
  static void Raise(int fd);
  static std::atomic<uint32_t> slots_[kCapacity];
  static std::atomic<int> high_water_;
};

}  // namespace fanstore::interpose
