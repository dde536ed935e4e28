// One batch ahead, its upload started while the step before runs (input_feed.hpp).
#include "trainer/input_feed.hpp"

#include <chrono>
#include <exception>
#include <utility>

namespace fanstore::trainer {

Tensor upload_input(Backend& backend, data::Batch& batch) {
  return backend.upload(Tensor::view(Shape(batch.input_shape), batch.input.data()));
}

double idle_wait(const std::function<bool(std::chrono::microseconds)>& ready, const std::function<bool()>& idle,
                 const std::function<double()>& now) {
  // Waiting while the device still runs the step's kernels costs nothing: only the wait after it went idle
  // is a stall.
  std::optional<double> idle_since;
  if (idle()) idle_since = now();
  while (!ready(std::chrono::milliseconds(1)))
    if (!idle_since && idle()) idle_since = now();
  return idle_since ? now() - *idle_since : 0.0;
}

double InputFeed::take_ahead() {
  if (ahead_ || done_ || error_) return 0;
  // A batch that cannot be loaded fails the step that uses it, not the one running now (whose metrics and
  // checkpoint come after this call).
  try {
    return take();
  } catch (...) {
    error_ = std::current_exception();
    return 0;
  }
}

double InputFeed::take() {
  const auto clock = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  double stall = idle_wait([&](std::chrono::microseconds t) { return prefetcher_.wait_ready(t); },
                           [&] { return backend_.idle(); }, clock);
  // Ready: next() returns at once, or (no prefetch threads) decodes the batch here, a stall if the device is idle.
  const double taken_at = clock();
  std::optional<data::Batch> batch = prefetcher_.next();
  if (backend_.idle()) stall += clock() - taken_at;
  if (!batch) {
    done_ = true;
    return stall;
  }
  Tensor input = upload_input(backend_, *batch);  // a view of the batch's memory, which moves with it
  ahead_.emplace(Fed{std::move(*batch), std::move(input), stall});
  return stall;
}

std::optional<InputFeed::Fed> InputFeed::next() {
  take_ahead();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  std::optional<Fed> fed = std::move(ahead_);
  ahead_.reset();
  return fed;
}

}  // namespace fanstore::trainer
