// The training loop's batches with their input on the device: while step k's kernels run, the loop
// takes batch k+1 from the prefetcher (read and decoded by the prefetch threads into the backend's
// input memory, page-locked on a GPU) and starts its upload (Backend::upload), so that the copy, and
// the reading and decoding of the batches after it, overlap the step.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <optional>

#include "trainer/backend.hpp"
#include "trainer/data/prefetcher.hpp"

namespace fanstore::trainer {

class InputFeed {
 public:
  struct Fed {
    data::Batch batch;
    Tensor input;        // batch.input on the device (on its way: the work queued from the upload on sees it)
    double stall_s = 0;  // how long the device sat idle while this batch was waited for
  };

  InputFeed(Backend& backend, data::Prefetcher& prefetcher) : backend_(backend), prefetcher_(prefetcher) {}

  // Takes the next batch and starts its upload, unless one is taken already or none is left. Call it
  // once a step's kernels are queued. Returns the batch's stall: the wait for the prefetcher since the
  // device went idle (Backend::idle, asked every millisecond; on the CPU the whole wait). A loading
  // error is kept for next() to throw.
  double take_ahead();
  // The batch taken ahead (taken now if none was), or nullopt after the last one. The batch's memory
  // stays as the upload needs it for as long as the caller keeps the Fed (past the step's synchronize).
  std::optional<Fed> next();

 private:
  double take();

  Backend& backend_;
  data::Prefetcher& prefetcher_;
  std::optional<Fed> ahead_;
  std::exception_ptr error_;
  bool done_ = false;
};

// The batch's input as a host view, uploaded (Backend::upload): a view, so the batch must outlive it.
Tensor upload_input(Backend& backend, data::Batch& batch);

// What a wait for a batch cost the device, in seconds: from when `idle()` first holds (asked before the
// wait and after every `ready(1 ms)` that says no) until `ready` says yes; 0 when the device never went
// idle. `now` reads a clock in seconds. InputFeed::take_ahead's rule, apart so it can be tested.
double idle_wait(const std::function<bool(std::chrono::microseconds)>& ready, const std::function<bool()>& idle,
                 const std::function<double()>& now);

}  // namespace fanstore::trainer
