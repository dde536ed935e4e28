// The performance model without MPI: candidate grids, costs that follow the grid (halo bytes only with
// a split, allreduce only with several ranks, memory per rank shrinking with the split), the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "trainer/distributed_perf_model.hpp"
#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"
#include "trainer/models.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

TEST(PerfModel, CandidateGridsAreEveryFactorisation) {
  const auto grids = candidate_grids(4, 3);
  std::set<std::string> names;
  for (const auto& g : grids) {
    EXPECT_EQ(g.ranks(), 4);
    names.insert(g.to_string());
  }
  EXPECT_EQ(names.size(), grids.size());
  // 4,1,1,1; 2 x (3 ways to split 2); 1 x (6 ways to split 4 into 3 ordered factors).
  EXPECT_EQ(grids.size(), 1u + 3u + 6u);
  EXPECT_TRUE(names.count("1,2,2,1"));
  EXPECT_EQ(candidate_grids(2, 2).size(), 3u);  // 2,1,1  1,2,1  1,1,2
}

TEST(PerfModel, BandwidthFitSurvivesATinyMessageSlowedByLoad) {
  const double mib4 = 4 << 20;
  EXPECT_DOUBLE_EQ(fit_bandwidth(2e-6, 402e-6, mib4), mib4 / 400e-6);  // the fit
  // A partner descheduled through every tiny round trip (seen: 4.0 ms against no more for 4 MiB): not 4 PB/s.
  EXPECT_DOUBLE_EQ(fit_bandwidth(4.0e-3, 3.9e-3, mib4), mib4 / 1.95e-3);
  // A slower large message never shows a higher bandwidth.
  double last = fit_bandwidth(4.0e-3, 1e-3, mib4);
  for (double large = 1.1e-3; large < 20e-3; large += 0.1e-3) {
    const double bw = fit_bandwidth(4.0e-3, large, mib4);
    EXPECT_LE(bw, last * (1 + 1e-12)) << large;
    last = bw;
  }
}

TEST(PerfModel, PiecesPayOnlyWhereTheOverlapSavesMoreThanTheyCost) {
  const LayerCost one{10e-3, 20e-3}, pieces{11e-3, 21e-3};
  // A 5 ms halo, of which the 8 ms interior hides all: 2 ms more compute for 5 ms less waiting.
  EXPECT_TRUE(pieces_pay(one, pieces, 8e-3, 5e-3, 0.5e-3));
  // A cheap halo (shared memory): the pieces' extra kernels cost more than the 0.1 ms it saves.
  EXPECT_FALSE(pieces_pay(one, pieces, 8e-3, 0.1e-3, 0.5e-3));
  // Only what the interior hides counts: a 50 ms halo leaves 42 ms to wait either way.
  EXPECT_TRUE(pieces_pay(one, pieces, 8e-3, 50e-3, 0.5e-3));
  EXPECT_FALSE(pieces_pay(one, pieces, 1e-3, 50e-3, 0.5e-3));
}

TEST(PerfModel, PredictionsFollowTheGrid) {
  // A small CosmoFlow-like network: conv + LeakyReLU + max pool twice, then flatten and a dense layer.
  auto model = std::make_unique<Model>("small", make_cpu_backend({1}), Shape{1, 4, 16, 16, 16});
  NodeId x = model->input();
  std::int64_t channels = 4;
  for (int i = 0; i < 2; ++i) {
    x = model->add<Convolution>({x}, "conv" + std::to_string(i), convolution_spec(3, channels, 8 << i, 3, 1, 1));
    x = model->add<Activation>({x}, "act" + std::to_string(i), leaky_relu(0.3f));
    x = model->add<Pooling>({x}, "pool" + std::to_string(i), pooling_spec(3, PoolingKind::Max, 2, 2));
    channels = 8 << i;
  }
  x = model->add<Flatten>({x}, "flatten");
  x = model->add<Linear>({x}, "fc", channels * 4 * 4 * 4, 4);
  model->finalize(x, 1);
  auto single = make_single_process_communicator();
  MachineCosts costs;
  costs.latency_s = 5e-6;
  costs.bandwidth_bytes_s = 5e9;
  costs.copy_bytes_s = 5e9;
  PerformanceModelOptions options;
  options.global_batch = 2;
  options.optimizer_states = 2;
  const std::vector<GridShape> grids{{2, {1, 1, 1}}, {1, {2, 1, 1}}, {1, {1, 1, 2}},
                                     {1, {1, 2, 2}}, {2, {8, 1, 1}}, {3, {1, 1, 1}}};
  const auto p = predict_grids(*model, grids, options, costs, *single);
  ASSERT_EQ(p.size(), grids.size());
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(p[static_cast<std::size_t>(i)].invalid, "") << grids[static_cast<std::size_t>(i)].to_string();
  // 2 sample groups of batch 1 on 16 ranks: the global batch 2 cannot be split.
  EXPECT_EQ(p[4].invalid, "");
  EXPECT_GT(p[4].redistribution_s, 0) << "8 parts along D down to 4 planes: the tail runs on fewer parts";
  EXPECT_NE(p[5].invalid.find("does not split into 3 sample groups"), std::string::npos) << p[5].invalid;
  // Data parallel: no halo, the whole gradient allreduced; spatial: halos, batch 2 per group.
  EXPECT_EQ(p[0].halo_bytes, 0);
  EXPECT_EQ(p[0].allreduce_bytes, 4.0 * static_cast<double>(model->parameters().parameter_count()));
  EXPECT_EQ(p[0].batch_per_group, 1);
  EXPECT_EQ(p[1].batch_per_group, 2);
  // Splitting D in 2: the first convolution's halo comes with its slab from the file, the second one
  // receives one 8x8 plane of the first pool's 8 channels (batch 2), forward and back; splitting 2x2
  // moves more (two faces and an edge).
  EXPECT_EQ(p[1].halo_bytes, 2 * 2 * 8 * 8 * 8 * 4.0);
  EXPECT_GT(p[3].halo_bytes, p[1].halo_bytes);
  // A rank's slab activations halve with a 2-way split of the same batch.
  EXPECT_LT(p[1].memory_bytes, p[0].memory_bytes * 2);
  for (const auto& q : p)
    if (q.invalid.empty()) {
      EXPECT_GT(q.compute_s, 0);
    }
  // Sharded state (the default) on the 2-way split keeps half of the gradients and of Adam's two states,
  // plus the largest tensor's gradient on its way; data parallelism shards nothing.
  PerformanceModelOptions whole = options;
  whole.shard_state = false;
  const auto q = predict_grids(*model, grids, whole, costs, *single);
  double largest = 0;
  for (const auto& e : model->parameters().parameters())
    largest = std::max(largest, static_cast<double>(e.shape.numel()) * 4.0);
  const double parameter_bytes = 4.0 * static_cast<double>(model->parameters().parameter_count());
  // (Each prediction measures the runtime's own bytes anew: they are compared without it.)
  const auto tensors = [](const GridPrediction& g) { return g.memory_bytes - g.runtime_bytes; };
  EXPECT_DOUBLE_EQ(tensors(q[1]) - tensors(p[1]), parameter_bytes * 3 / 2 - largest);
  EXPECT_EQ(tensors(q[0]), tensors(p[0]));
  // The weights sharded too: half of them kept, and in place of the largest gradient on its way a layer's
  // gathered weights beside the next layer's gradient (conv1's and fc's here), and a gather per layer with
  // parameters forward and backward in place of one gather of all.
  PerformanceModelOptions weights = options;
  weights.shard_weights = true;
  const auto w = predict_grids(*model, grids, weights, costs, *single);
  const auto layer_bytes = [&](const std::string& name) {
    double bytes = 0;
    for (NodeId id = 1; id < model->node_count(); ++id)
      if (model->node_layer(id)->name() == name)
        for (auto h : model->node_layer(id)->parameter_handles())
          bytes += 4.0 * static_cast<double>(model->parameters().parameters()[h.index].shape.numel());
    return bytes;
  };
  EXPECT_DOUBLE_EQ(tensors(p[1]) - tensors(w[1]),
                   parameter_bytes / 2 + largest - layer_bytes("conv1") - layer_bytes("fc"));
  EXPECT_EQ(tensors(w[0]), tensors(p[0])) << "no spatial group: nothing to shard";
  EXPECT_GT(w[1].allreduce_s, p[1].allreduce_s);
  // LARS cuts the parts between tensors: the larger part (conv0 and conv1 here, 4328 of 8444 floats) is held.
  PerformanceModelOptions lars = options;
  lars.whole_tensor_parts = true;
  const auto l = predict_grids(*model, grids, lars, costs, *single);
  const double larger = 4.0 * static_cast<double>(std::max(arena_part(model->parameters(), 2, 0, true).size(),
                                                           arena_part(model->parameters(), 2, 1, true).size()));
  EXPECT_EQ(larger, 4.0 * 4328);
  EXPECT_DOUBLE_EQ(tensors(l[1]) - tensors(p[1]), 3 * (larger - parameter_bytes / 2));
  const int best = best_grid(p);
  ASSERT_GE(best, 0);
  const std::string table = explain_table(p, costs, best);
  EXPECT_NE(table.find("<- chosen"), std::string::npos);
  EXPECT_NE(table.find("cannot run"), std::string::npos);
  EXPECT_GT(peak_rss_bytes(), 1e6);
}

TEST(PerfModel, ActivationPeakIsWhatATrainingStepHolds) {
  // The predicted activation peak of the serial grid against the tensors a training step of the same model
  // holds at its most (Storage::host_peak_bytes), parameters and input apart. ResNet-50's peak is at the
  // start of backward, where the dense layer's kernel holds its weight and weight gradient in its own
  // layout for a moment (the layer's measured scratch).
  for (const std::string name : {"cosmoflow", "unet3d", "resnet50"}) {
    ModelOptions o;
    o.input_size = name == "unet3d" ? 64 : name == "resnet50" ? 128 : 32;
    o.input_depth = 32;
    auto model = build_model(name, make_cpu_backend({1}), o);
    model->set_input_gradient(false);  // as training runs
    auto single = make_single_process_communicator();
    PerformanceModelOptions options;
    options.global_batch = 1;
    const GridShape serial{1, std::vector<int>(static_cast<std::size_t>(model->input_shape().spatial_rank()), 1)};
    const auto p = predict_grids(*model, {serial}, options, MachineCosts{}, *single);
    ASSERT_EQ(p.at(0).invalid, "");
    Tensor x = Tensor::zeros(model->input_shape());
    Tensor dy = Tensor::zeros(model->output_shape());
    model->forward(x, Mode::Train);  // warm: the backend's first-use buffers
    model->backward(dy);
    Storage::release_kept_host();
    const double before = static_cast<double>(Storage::host_bytes_in_use());
    model->forward(x, Mode::Train);
    model->backward(dy);
    const double measured = static_cast<double>(Storage::host_peak_bytes()) - before;
    EXPECT_NEAR(p[0].activation_bytes, measured, 0.1 * measured) << name;
  }
}

}  // namespace
}  // namespace fanstore::trainer
