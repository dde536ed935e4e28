// Bucketed gradient allreduce started from the backward hook, in reverse layer order, in waves no larger
// than the communicator lets be in flight.
#include <algorithm>
#include <limits>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"

namespace fanstore::trainer {

GradientAllreduce::GradientAllreduce(Communicator& comm, ParameterTable& table, std::size_t bucket_bytes,
                                     std::size_t replicas)
    : comm_(comm),
      table_(table),
      replicas_(replicas ? replicas : static_cast<std::size_t>(comm.size())),
      piece_floats_(comm.sum_bytes_in_flight() ? std::max<std::size_t>(1, comm.sum_bytes_in_flight() / sizeof(float))
                                               : std::numeric_limits<std::size_t>::max()) {
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
  in_backward_ = true;
}

void GradientAllreduce::on_layer_ready(const Layer& layer) {
  if (comm_.size() == 1) return;
  std::size_t first = std::numeric_limits<std::size_t>::max();
  for (auto h : layer.parameter_handles()) first = std::min(first, table_.parameters()[h.index].offset);
  if (first < ready_from_) ready_from_ = first;
  start_ready(ready_from_);  // also drives the ones in flight
}

void GradientAllreduce::start_ready(std::size_t ready_from) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= ready_from) {
    const Bucket& b = buckets_[next_bucket_++];
    // Pieces from the bucket's end down, as the buckets go: the arena is covered in reverse order.
    for (std::size_t end = b.end; end > b.begin;) {
      const std::size_t begin = end - std::min(end - b.begin, piece_floats_);
      queued_.push_back({begin, end, end == b.end});
      end = begin;
    }
  }
  pump(false);
}

// Without an in-flight limit (NCCL: sums run in issue order on one stream) every ready piece starts at once. Waiting
// for the stream there would make the order of collectives depend on each GPU's progress: a bucket deferred on one
// rank alone, behind another communicator's blocking sum on the same stream, deadlocks both ranks.
void GradientAllreduce::pump(bool block) {
  const bool limited = piece_floats_ != std::numeric_limits<std::size_t>::max();
  for (;;) {
    const bool done = comm_.poll();  // drives the wave in flight (MPI progresses only inside MPI calls)
    if (queued_.empty()) return;
    if (!done && limited) {
      if (!block) return;
      comm_.wait_all();
    }
    std::size_t wave = 0;
    while (!queued_.empty() && (wave == 0 || wave + (queued_.front().end - queued_.front().begin) <= piece_floats_)) {
      const Piece p = queued_.front();
      queued_.pop_front();
      comm_.start_sum(table_.gradients() + p.begin, p.end - p.begin);
      wave += p.end - p.begin;
      if (p.first_of_bucket && in_backward_) ++started_in_backward_;
    }
    if (!block) return;
  }
}

void GradientAllreduce::finish() {
  in_backward_ = false;
  if (comm_.size() == 1) return;
  start_ready(0);
  pump(true);
  comm_.wait_all();
  if (replicas_ == 1) return;
  Tensor gradients = table_.arena(Arena::Gradients);
  table_.backend().scale(gradients, 1.f / static_cast<float>(replicas_));
}

}  // namespace fanstore::trainer
