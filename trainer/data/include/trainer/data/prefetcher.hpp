// Background batch decoding: N worker threads fill a bounded window of batches ahead of the trainer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "trainer/data/batch.hpp"
#include "trainer/data/batch_loader.hpp"

namespace fanstore::trainer::data {

struct PrefetchOptions {
  int threads = 2;      // 0: decode synchronously inside next()
  int queue_depth = 4;  // batches decoded or being decoded ahead of the one the trainer takes
};

// Hands out the batches of one epoch in order. Workers claim batch numbers in order but only
// within `queue_depth` of the consumer, which bounds memory; batch content comes from
// BatchLoader::load, so it is the same for any thread count. A worker's exception is re-thrown by
// next() when the trainer reaches that batch. The destructor stops and joins the workers.
class Prefetcher {
 public:
  Prefetcher(const BatchLoader& loader, std::vector<std::vector<std::size_t>> batches, std::uint64_t epoch,
             PrefetchOptions options);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  std::size_t batch_count() const { return batches_.size(); }

  // The next batch, or nullopt after the last one.
  std::optional<Batch> next();
  // Waits up to `timeout` until next() would return without waiting for a worker; true when it
  // would (always without workers: next() then decodes the batch itself).
  bool wait_ready(std::chrono::microseconds timeout);

 private:
  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  void worker_loop();

  const BatchLoader& loader_;
  const std::vector<std::vector<std::size_t>> batches_;
  const std::uint64_t epoch_;
  const PrefetchOptions options_;

  std::mutex mutex_;
  std::condition_variable work_available_;
  std::condition_variable batch_ready_;
  std::size_t next_to_claim_ = 0;
  std::size_t next_to_hand_out_ = 0;
  std::map<std::size_t, Slot> finished_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  void stop_workers();  // tells the workers to stop, joins them
};

}  // namespace fanstore::trainer::data
