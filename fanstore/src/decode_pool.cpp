// DecodePool: lazily started, signal-free worker threads with a bounded queue (see decode_pool.hpp).
#include "decode_pool.hpp"

#include <signal.h>

#include <new>

namespace fanstore {

void DecodePool::Shutdown() {
  std::vector<pthread_t> ts;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    queue_.clear();
    ts.swap(threads_);
  }
  cv_.notify_all();
  for (pthread_t t : ts) pthread_join(t, nullptr);
}

void* DecodePool::Main(void* self) {
  auto* pool = static_cast<DecodePool*>(self);
  if (void (*hook)() = pool->start_hook_.load(std::memory_order_acquire)) hook();
  pool->Loop();
  return nullptr;
}

void DecodePool::Loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    --idle_;
    if (stop_) return;
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    try {
      task();
    } catch (...) {
      // A task reports its own failure to whoever waits for it (ChunkCache); nothing must escape here.
    }
    lk.lock();
  }
}

bool DecodePool::Submit(std::function<void()> task) {
  std::lock_guard<std::mutex> lk(mu_);
  if (stop_ || queue_.size() >= kMaxQueue) return false;
  queue_.push_back(std::move(task));
  if (idle_ == 0 && static_cast<int>(threads_.size()) < max_threads_) {
    // The program's signal handlers must never run on our threads: block everything in them.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    if (pthread_create(&t, nullptr, &DecodePool::Main, this) == 0) threads_.push_back(t);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (threads_.empty()) {
      queue_.pop_back();
      return false;
    }
  }
  cv_.notify_one();
  return true;
}

void DecodePool::UnlockForFork(bool child) {
  if (child) {
    // The threads did not come along: forget them (their stacks stay mapped, unused) and the queue, whose
    // tasks the parent runs. Their waiters were dropped by ChunkCache::UnlockForFork.
    threads_.clear();
    queue_.clear();
    idle_ = 0;
    new (&cv_) std::condition_variable();
  }
  mu_.unlock();
}

}  // namespace fanstore
