// The performance model under MPI: measured latency and bandwidth are positive and the same on every
// rank, and the layer timings shared out over the ranks give every rank the same predictions.
#include <gtest/gtest.h>

#include "spatial_testing.hpp"
#include "trainer/distributed_perf_model.hpp"
#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"

namespace fanstore::trainer {
namespace {

using testing::world;

TEST(PerfModelMpi, MeasuredCostsAndPredictionsAgreeOnEveryRank) {
  const MachineCosts costs = measure_machine_costs(world());
  EXPECT_GT(costs.latency_s, 0);
  EXPECT_LT(costs.latency_s, 0.1) << "a tiny message takes under 100 ms even on a loaded machine";
  EXPECT_GT(costs.bandwidth_bytes_s, 1e6);
  EXPECT_GT(costs.copy_bytes_s, 1e7);
  double mine[3] = {costs.latency_s, costs.bandwidth_bytes_s, costs.copy_bytes_s}, most[3], least[3];
  std::copy(mine, mine + 3, most);
  for (int i = 0; i < 3; ++i) least[i] = -mine[i];
  world().max(most, 3);
  world().max(least, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(most[i], -least[i]) << "rank 0's figures are everyone's";

  auto model = std::make_unique<Model>("small", make_cpu_backend({1}), Shape{1, 2, 16, 16, 16});
  NodeId x = model->add<Convolution>({model->input()}, "conv", convolution_spec(3, 2, 4, 3, 1, 1));
  x = model->add<Pooling>({x}, "pool", pooling_spec(3, PoolingKind::Max, 2, 2));
  x = model->add<Flatten>({x}, "flatten");
  x = model->add<Linear>({x}, "fc", 4 * 8 * 8 * 8, 3);
  model->finalize(x, 1);
  PerformanceModelOptions options;
  options.global_batch = world().size();
  const auto predictions = predict_grids(*model, candidate_grids(world().size(), 3), options, costs, world());
  std::vector<double> steps;
  for (const auto& p : predictions) steps.push_back(p.invalid.empty() ? p.step_s : -1);
  std::vector<double> top = steps;
  world().max(top.data(), top.size());
  EXPECT_EQ(steps, top);
  EXPECT_GE(best_grid(predictions), 0);
}

}  // namespace
}  // namespace fanstore::trainer
