// A few threads that decode chunks for readers (read-ahead, multi-chunk reads, kernel fds). Started on first
// use; after fork the child has none (they start again on its first use) and none of the parent's queue.
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

namespace fanstore {

class DecodePool {
 public:
  explicit DecodePool(int threads) : max_threads_(threads < 1 ? 1 : threads) {}
  ~DecodePool() { Shutdown(); }
  // Drops queued tasks and joins the threads (running tasks finish first). Idempotent; Submit fails after it.
  void Shutdown();
  int threads() const { return max_threads_; }
  // Queues `task`; false when the queue is full (the caller does the work itself or skips it).
  bool Submit(std::function<void()> task);
  // Runs first on every thread the pool starts (the interposer marks the thread as its own: whatever the client
  // does there, closing its fds included, goes straight to libc, as on a program's thread inside a wrapper).
  void SetThreadStartHook(void (*hook)()) { start_hook_.store(hook, std::memory_order_release); }
  void LockForFork() { mu_.lock(); }
  void UnlockForFork(bool child);

 private:
  static void* Main(void* self);
  void Loop();

  const int max_threads_;
  static constexpr size_t kMaxQueue = 256;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<pthread_t> threads_;
  int idle_ = 0;
  bool stop_ = false;
  std::atomic<void (*)()> start_hook_{nullptr};
};

}  // namespace fanstore
