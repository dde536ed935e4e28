// Bucketed allreduce: buckets tile the arena in reverse order and start during backward, in waves within the
// communicator's in-flight limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "trainer/distributed.hpp"
#include "trainer/models.hpp"

namespace fanstore::trainer {
namespace {

// Pretends to be 2 ranks whose other rank holds the same gradients: a sum doubles each value,
// so averaging must give the gradients back. Records the order of the started ranges.
class TwinRanks final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void start_sum(float* data, std::size_t n) override {
    started.emplace_back(data, n);
    for (std::size_t i = 0; i < n; ++i) data[i] *= 2;
    in_flight += n * sizeof(float);
    most_in_flight = std::max(most_in_flight, in_flight);
  }
  // With a limit, a wave stays in flight until the second poll after it started (or wait_all); a lagging device
  // (NCCL's stream behind the host) finishes nothing before wait_all.
  bool poll() override {
    if (lagging) return in_flight == 0;
    if (limit == 0 || in_flight == 0 || std::exchange(polled, true)) return finish_wave();
    return false;
  }
  void wait_all() override { finish_wave(); }
  std::size_t sum_bytes_in_flight() const override { return limit; }
  void sum(double* data, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) data[i] *= 2;
  }
  void sum(float* data, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) data[i] *= 2;
  }
  void max(double*, std::size_t) override {}
  void gather(float*, const std::vector<std::size_t>&) override { throw std::logic_error("no gather"); }
  void broadcast(void*, std::size_t, int) override {}
  std::unique_ptr<MessageBatch> start_messages() override { throw std::logic_error("no messages"); }
  std::unique_ptr<Communicator> split(int, int) override { throw std::logic_error("no split"); }
  [[noreturn]] void abort(int code) override { std::exit(code); }
  bool finish_wave() {
    in_flight = 0;
    polled = false;
    return true;
  }
  std::vector<std::pair<float*, std::size_t>> started;
  std::size_t limit = 0, in_flight = 0, most_in_flight = 0;
  bool polled = false, lagging = false;
};

// Runs one step of CosmoFlow with `comm`'s allreduce: every gradient covered once, in reverse arena order,
// averaged exactly.
// `all_in_backward`: every bucket but the first layer's starts inside backward (else at least one).
void expect_reverse_tiling(TwinRanks& comm, std::size_t bucket_bytes, bool all_in_backward) {
  ModelOptions o;
  o.batch = 2;
  o.input_size = 32;
  auto model = build_model("cosmoflow", make_cpu_backend({1}), o);
  ParameterTable& t = model->parameters();
  GradientAllreduce allreduce(comm, t, bucket_bytes);
  EXPECT_GT(allreduce.bucket_count(), 3u);
  Tensor x = Tensor::zeros(model->input_shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) x[i] = static_cast<float>((i % 7) - 3) * 0.1f;
  Tensor y = model->forward(x, Mode::Train);
  Tensor dy = Tensor::zeros(y.shape());
  for (std::int64_t i = 0; i < dy.numel(); ++i) dy[i] = 1.f;
  model->backward(dy);  // reference gradients, no communication
  const std::vector<float> reference(t.gradients(), t.gradients() + t.parameter_count());

  model->set_gradient_ready_hook([&](const Layer& l) { allreduce.on_layer_ready(l); });
  model->forward(x, Mode::Train);
  allreduce.begin_step();
  model->backward(dy);
  EXPECT_GE(allreduce.started_during_backward(), all_in_backward ? allreduce.bucket_count() - 1 : 1)
      << "buckets should start inside backward";
  allreduce.finish();

  // Reverse order, contiguous, covering every gradient exactly once.
  std::size_t expected_end = t.parameter_count();
  for (auto& [data, n] : comm.started) {
    const auto begin = static_cast<std::size_t>(data - t.gradients());
    EXPECT_EQ(begin + n, expected_end);
    expected_end = begin;
  }
  EXPECT_EQ(expected_end, 0u);
  // x2 by the fake sum and x0.5 by the averaging are exact in float.
  for (std::size_t i = 0; i < t.parameter_count(); ++i) ASSERT_EQ(t.gradients()[i], reference[i]) << i;
}

TEST(GradientAllreduce, BucketsTileTheArenaInReverseAndOverlapBackward) {
  TwinRanks comm;
  expect_reverse_tiling(comm, 1u << 20, true);  // 1 MB buckets: several for 4.7M parameters
}

TEST(GradientAllreduce, NoMoreInFlightThanTheCommunicatorAllows) {
  // MPI's nonblocking allreduce copies each message: 256 KiB at a time here, in pieces of the 1 MB buckets.
  TwinRanks comm;
  comm.limit = 256u << 10;
  expect_reverse_tiling(comm, 1u << 20, false);
  EXPECT_LE(comm.most_in_flight, comm.limit);
  EXPECT_GT(comm.started.size(), 4u * 4u);  // the buckets went in pieces
}

TEST(GradientAllreduce, WithoutALimitEveryBucketStartsWhenReadyHoweverFarTheDeviceLags) {
  // NCCL runs every communicator's sums in issue order on one stream: a bucket held back until the stream is
  // idle would start at a point that differs between ranks, and could queue behind another communicator's sum
  // on one rank only (a deadlock). So the order of starts must not depend on poll().
  TwinRanks comm;
  comm.lagging = true;
  expect_reverse_tiling(comm, 1u << 20, true);
}

}  // namespace
}  // namespace fanstore::trainer
