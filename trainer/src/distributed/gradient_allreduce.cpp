// Bucketed gradient allreduce started from the backward hook, in reverse layer order.
#include <algorithm>
#include <limits>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"

namespace fanstore::trainer {

GradientAllreduce::GradientAllreduce(Communicator& comm, ParameterTable& table, std::size_t bucket_bytes,
                                     std::size_t replicas)
    : comm_(comm), table_(table), replicas_(replicas ? replicas : static_cast<std::size_t>(comm.size())) {
  const std::size_t bucket_floats = std::max<std::size_t>(1, bucket_bytes / sizeof(float));
  const auto& entries = table.parameters();
  std::size_t end = table.parameter_count();
  // Walk the parameters from the last declared one back; cut whenever a bucket is full.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (end - it->offset >= bucket_floats) {
      buckets_.push_back({it->offset, end});
      end = it->offset;
    }
  }
  if (end > 0) buckets_.push_back({0, end});
}

void GradientAllreduce::begin_step() {
  next_bucket_ = 0;
  ready_from_ = table_.parameter_count();
  started_in_backward_ = 0;
}

void GradientAllreduce::on_layer_ready(const Layer& layer) {
  if (comm_.size() == 1) return;
  std::size_t first = std::numeric_limits<std::size_t>::max();
  for (auto h : layer.parameter_handles()) first = std::min(first, table_.parameters()[h.index].offset);
  if (first < ready_from_) ready_from_ = first;
  const std::size_t before = next_bucket_;
  start_ready(ready_from_);
  started_in_backward_ += next_bucket_ - before;
  comm_.poll();  // drive the ones already in flight
}

void GradientAllreduce::start_ready(std::size_t ready_from) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= ready_from) {
    const Bucket& b = buckets_[next_bucket_++];
    comm_.start_sum(table_.gradients() + b.begin, b.end - b.begin);
  }
}

void GradientAllreduce::finish() {
  if (comm_.size() == 1) return;
  start_ready(0);
  comm_.wait_all();
  if (replicas_ == 1) return;
  Tensor gradients = table_.arena(Arena::Gradients);
  table_.backend().scale(gradients, 1.f / static_cast<float>(replicas_));
}

}  // namespace fanstore::trainer
