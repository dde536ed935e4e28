// Prefetch workers: claim batch numbers in order within a bounded window, hand results out in order.
#include "trainer/data/prefetcher.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <system_error>

namespace fanstore::trainer::data {

Prefetcher::Prefetcher(const BatchLoader& loader, std::vector<std::vector<std::size_t>> batches, std::uint64_t epoch,
                       PrefetchOptions options)
    : loader_(loader), batches_(std::move(batches)), epoch_(epoch), options_(options) {
  const int threads = std::max(0, options_.threads);
  workers_.reserve(static_cast<std::size_t>(threads));
  try {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    // A thread the system refuses (a per-user process limit, no memory for its stack): stop the ones started, or
    // their std::thread objects would end the process with std::terminate and no word of why.
    const std::size_t started = workers_.size();
    stop_workers();
    throw std::runtime_error("cannot start prefetch thread " + std::to_string(started + 1) + " of " +
                             std::to_string(threads) + " (" + e.code().message() +
                             "): use fewer --prefetch-threads, or raise the process limit (ulimit -u)");
  }
}

void Prefetcher::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
}

Prefetcher::~Prefetcher() { stop_workers(); }

void Prefetcher::worker_loop() {
  const std::size_t window = static_cast<std::size_t>(std::max(1, options_.queue_depth));
  std::unique_lock lock(mutex_);
  while (true) {
    // Wait for a batch that is both left to do and within the window: the window is what keeps
    // memory bounded when decoding is faster than training.
    work_available_.wait(lock, [&] {
      return stopping_ || (next_to_claim_ < batches_.size() && next_to_claim_ < next_to_hand_out_ + window);
    });
    if (stopping_) return;
    const std::size_t number = next_to_claim_++;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = loader_.load(number, batches_[number], epoch_);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    finished_.emplace(number, std::move(slot));
    batch_ready_.notify_all();
  }
}

bool Prefetcher::wait_ready(std::chrono::microseconds timeout) {
  if (workers_.empty()) return true;
  std::unique_lock lock(mutex_);
  return batch_ready_.wait_for(
      lock, timeout, [&] { return next_to_hand_out_ >= batches_.size() || finished_.count(next_to_hand_out_) != 0; });
}

std::optional<Batch> Prefetcher::next() {
  if (workers_.empty()) {  // threads = 0: decode here, in order
    if (next_to_hand_out_ >= batches_.size()) return std::nullopt;
    const std::size_t number = next_to_hand_out_++;
    return loader_.load(number, batches_[number], epoch_);
  }
  std::unique_lock lock(mutex_);
  if (next_to_hand_out_ >= batches_.size()) return std::nullopt;
  const std::size_t number = next_to_hand_out_;
  batch_ready_.wait(lock, [&] { return finished_.count(number) != 0; });
  Slot slot = std::move(finished_.at(number));
  finished_.erase(number);
  ++next_to_hand_out_;
  lock.unlock();
  work_available_.notify_all();  // the window moved: one more batch may start
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

}  // namespace fanstore::trainer::data
