// DLIO's model of training: I/O overlaps compute through a bounded prefetch queue; utilisation = compute / total.
#include "dlio_emulator.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "bench_util.hpp"

namespace fanstore::bench {
namespace {

// Ready-batch counter with back-pressure: readers block when `capacity` batches wait for the accelerator.
class ReadyQueue {
 public:
  explicit ReadyQueue(size_t capacity) : capacity_(capacity) {}
  // Returns false when aborted (end of run or a reader failed).
  bool WaitForRoom() {
    std::unique_lock lock(mu_);
    room_.wait(lock, [&] { return reserved_ < capacity_ || aborted_; });
    ++reserved_;
    return !aborted_;
  }
  void Push() {
    std::lock_guard lock(mu_);
    ++ready_;
    ready_cv_.notify_one();
  }
  // Returns false when aborted (a reader failed).
  bool Pop() {
    std::unique_lock lock(mu_);
    ready_cv_.wait(lock, [&] { return ready_ > 0 || aborted_; });
    if (aborted_) return false;
    --ready_;
    --reserved_;
    room_.notify_one();
    return true;
  }
  void Abort() {
    std::lock_guard lock(mu_);
    aborted_ = true;
    room_.notify_all();
    ready_cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable room_, ready_cv_;
  size_t capacity_, reserved_ = 0, ready_ = 0;
  bool aborted_ = false;
};

}  // namespace

DlioResult RunDlio(const DlioConfig& c) {
  DlioResult result;
  const size_t per_epoch = c.samples.size() / c.batch;
  if (per_epoch == 0) {
    result.error = "fewer samples than one batch";
    return result;
  }
  // The whole run's sample order up front: one seeded shuffle per epoch.
  std::vector<size_t> order;
  std::mt19937_64 rng(c.seed);
  for (int e = 0; e < c.epochs; ++e) {
    std::vector<size_t> idx(c.samples.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(per_epoch * c.batch);
    order.insert(order.end(), idx.begin(), idx.end());
  }
  const size_t total_batches = order.size() / c.batch;
  const int threads = std::max(1, c.threads);

  ReadyQueue queue(static_cast<size_t>(threads) * static_cast<size_t>(std::max(1, c.prefetch)));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::mutex error_mu;
  auto reader = [&] {
    std::vector<char> buffer(c.block);
    for (;;) {
      if (!queue.WaitForRoom()) return;
      size_t b = next.fetch_add(1);
      if (b >= total_batches) return;
      for (size_t k = 0; k < c.batch; ++k) {
        const std::string& path = c.samples[order[b * c.batch + k]];
        int64_t n = ReadWholeFile(path, buffer);
        if (n < 0) {
          std::lock_guard lock(error_mu);
          if (result.error.empty()) result.error = path + ": " + std::strerror(errno);
          queue.Abort();
          return;
        }
        bytes += static_cast<uint64_t>(n);
      }
      queue.Push();
    }
  };

  double start = NowSeconds();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(reader);
  for (size_t b = 0; b < total_batches; ++b) {
    if (!queue.Pop()) break;
    // The emulated accelerator step: a sleep, as in DLIO, so it costs no CPU that the readers need.
    if (c.compute_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(c.compute_s));
    result.compute_seconds += c.compute_s;
    ++result.batches;
  }
  result.seconds = NowSeconds() - start;
  queue.Abort();  // releases readers still waiting for room
  for (auto& t : pool) t.join();
  result.samples = result.batches * c.batch;
  result.bytes = bytes;
  return result;
}

}  // namespace fanstore::bench
