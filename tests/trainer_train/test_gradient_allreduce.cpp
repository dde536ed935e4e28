// Bucketed allreduce: buckets tile the arena in reverse order and start during backward.
#include <gtest/gtest.h>

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
  }
  bool poll() override { return true; }
  void wait_all() override {}
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
  std::vector<std::pair<float*, std::size_t>> started;
};

TEST(GradientAllreduce, BucketsTileTheArenaInReverseAndOverlapBackward) {
  ModelOptions o;
  o.batch = 2;
  o.input_size = 32;
  auto model = build_model("cosmoflow", make_cpu_backend({1}), o);
  ParameterTable& t = model->parameters();
  TwinRanks comm;
  GradientAllreduce allreduce(comm, t, 1u << 20);  // 1 MB buckets: several for 4.7M parameters
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
  EXPECT_GE(allreduce.started_during_backward(), allreduce.bucket_count() - 1)
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

}  // namespace
}  // namespace fanstore::trainer
