// Optimizer state sharded over the ranks (ZeRO stage 1): every optimizer, after several steps on the
// same gradients, leaves exactly the values and state of the unsharded one; the gathered state makes
// the same checkpoint, and that checkpoint resumes sharded or not. Gradients sharded too (ZeRO stage 2):
// each rank keeps the sum of its part only, over its group and then over the replica groups. Weights sharded
// too (ZeRO stage 3): a layer's weights are whole only between its gather and drop, and the same steps follow.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <string>

#include "spatial_testing.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/distributed.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/structural.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

using testing::world;

// Conv (with bias) + dense head: tensors of rank 1 (LARS-excluded) and larger ones, in an arena that
// does not split evenly over 2, 3 or 4 ranks.
std::unique_ptr<Model> small_model() {
  auto m = std::make_unique<Model>("small", make_cpu_backend({1}), Shape{1, 3, 6, 6});
  NodeId x = m->add<Convolution>({m->input()}, "conv", convolution_spec(2, 3, 5, 3, 1, 1, /*bias=*/true));
  x = m->add<Flatten>({x}, "flatten");
  x = m->add<Linear>({x}, "fc", 5 * 6 * 6, 7);
  m->finalize(x, 1);
  return m;
}

// The same pseudo-random gradients on every rank, different per step.
void set_gradients(ParameterTable& t, int step) {
  std::vector<float> g(t.parameter_count());
  for (std::size_t i = 0; i < g.size(); ++i)
    g[i] = static_cast<float>(static_cast<int>((i * 2654435761u + static_cast<unsigned>(step) * 97u) % 2001) - 1000) *
           1e-3f;
  t.write(Arena::Gradients, g);
}

TEST(ShardedState, EveryOptimizerUpdatesExactlyAsUnsharded) {
  for (const std::string kind : {"sgd", "adam", "lars"}) {
    auto plain = small_model(), sharded = small_model();
    OptimizerOptions o;
    o.kind = kind;
    o.weight_decay = 1e-4f;
    auto a = make_optimizer(plain->parameters(), o), b = make_optimizer(sharded->parameters(), o);
    b->shard_over(world());
    const std::size_t count = plain->parameters().parameter_count();
    if (world().size() > 1) {
      EXPECT_TRUE(b->sharded());
      EXPECT_LT(b->part().size(), count) << kind;
      EXPECT_EQ(static_cast<std::size_t>(b->state().at(0).second.numel()), b->part().size());
    }
    for (int step = 0; step < 3; ++step) {
      set_gradients(plain->parameters(), step);
      set_gradients(sharded->parameters(), step);
      a->step(plain->parameters(), 0.05f);
      b->step(sharded->parameters(), 0.05f);
    }
    EXPECT_EQ(plain->parameters().read(Arena::Values), sharded->parameters().read(Arena::Values)) << kind;
    const auto whole_a = a->whole_state(), whole_b = b->whole_state();
    ASSERT_EQ(whole_a.size(), whole_b.size());
    for (std::size_t i = 0; i < whole_a.size(); ++i) {
      EXPECT_EQ(whole_a[i].first, whole_b[i].first);
      EXPECT_EQ(whole_a[i].second, whole_b[i].second) << kind << " " << whole_a[i].first;
    }
  }
}

// The values a rank reads of parameter `h` while its layer's weights are gathered.
std::vector<float> gathered(ParameterTable& t, const Layer& layer, std::size_t k) {
  t.gather_values(layer.parameter_handles());
  const Tensor v = t.backend().to_host(t.value(layer.parameter_handles()[k]));
  std::vector<float> out(v.data(), v.data() + v.numel());
  t.drop_values(layer.parameter_handles());
  return out;
}

TEST(ShardedWeights, LayersAreWholeOnlyWhileGatheredAndStepsMatch) {
  for (const std::string kind : {"sgd", "lars"}) {
    auto plain = small_model(), sharded = small_model();
    OptimizerOptions o;
    o.kind = kind;
    auto a = make_optimizer(plain->parameters(), o), b = make_optimizer(sharded->parameters(), o);
    b->shard_over(world());
    ParameterTable& t = sharded->parameters();
    t.keep_value_part(world(), b->parts());
    const Layer& conv = *sharded->node_layer(1);
    ASSERT_EQ(conv.parameter_handles().size(), 2u);
    EXPECT_EQ(t.value_part(), b->part());
    EXPECT_EQ(static_cast<std::size_t>(t.arena(Arena::Values).numel()), b->part().size());
    if (world().size() > 1) {
      EXPECT_THROW(t.value(conv.parameter_handles()[0]), std::logic_error) << "read outside a gather";
    }
    for (int step = 0; step < 3; ++step) {
      set_gradients(plain->parameters(), step);
      set_gradients(t, step);
      a->step(plain->parameters(), 0.05f);
      b->step(t, 0.05f);
    }
    // The whole arena read (collective) and each layer's gathered weights are the unsharded run's.
    const std::vector<float> whole = plain->parameters().read(Arena::Values);
    EXPECT_EQ(t.read(Arena::Values), whole) << kind;
    for (std::size_t k = 0; k < 2; ++k) {
      const auto& e = t.parameters()[conv.parameter_handles()[k].index];
      const std::vector<float> expected(whole.begin() + static_cast<std::ptrdiff_t>(e.offset),
                                        whole.begin() + static_cast<std::ptrdiff_t>(e.offset) + e.shape.numel());
      EXPECT_EQ(gathered(t, conv, k), expected) << kind << " " << e.name;
    }
    EXPECT_TRUE(t.all_values_finite());
  }
}

TEST(ShardedWeights, WritesKeepTheOwnPartAndANaNAnywhereIsSeenEverywhere) {
  auto m = small_model();
  ParameterTable& t = m->parameters();
  auto optimizer = make_optimizer(t, OptimizerOptions{});
  optimizer->shard_over(world());
  t.keep_value_part(world(), optimizer->parts());
  std::vector<float> whole(t.parameter_count());
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i) * 0.5f;
  t.write(Arena::Values, whole);
  EXPECT_EQ(t.read(Arena::Values), whole);
  const Layer& fc = *m->node_layer(m->output_node());
  const auto& e = t.parameters()[fc.parameter_handles()[0].index];
  EXPECT_EQ(gathered(t, fc, 0)[3], whole[e.offset + 3]);
  // A NaN in the last rank's part only: every rank's answer is no.
  if (world().rank() == world().size() - 1) {
    Tensor last = t.arena(Arena::Values).slice(static_cast<std::size_t>(t.arena(Arena::Values).numel()) - 1, Shape{1});
    t.backend().fill(last, std::numeric_limits<float>::quiet_NaN());
  }
  EXPECT_FALSE(t.all_values_finite());
  EXPECT_THROW(t.write(Arena::Values, std::vector<float>(3)), std::invalid_argument);
}

TEST(ShardedState, PartsTileTheArena) {
  auto m = small_model();
  const ParameterTable& t = m->parameters();
  for (int parts : {1, 2, 3, 4, 7})
    for (bool whole : {false, true}) {
      std::size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const ArenaPart p = arena_part(t, parts, i, whole);
        EXPECT_EQ(p.begin, next);
        next = p.end;
        if (!whole) {
          EXPECT_LE(p.size(), t.parameter_count() / static_cast<std::size_t>(parts) + 1);
          continue;
        }
        bool starts_a_tensor = p.begin == t.parameter_count();
        for (const auto& e : t.parameters()) starts_a_tensor = starts_a_tensor || e.offset == p.begin;
        EXPECT_TRUE(starts_a_tensor) << "a LARS part starts where a tensor starts";
      }
      EXPECT_EQ(next, t.parameter_count());
    }
}

TEST(ShardedState, ACheckpointOfShardedStateResumesShardedOrNot) {
  auto trained = small_model();
  OptimizerOptions o;
  o.kind = "adam";
  auto optimizer = make_optimizer(trained->parameters(), o);
  optimizer->shard_over(world());
  for (int step = 0; step < 2; ++step) {
    set_gradients(trained->parameters(), step);
    optimizer->step(trained->parameters(), 0.01f);
  }
  const std::string path = "/tmp/fanstore_sharded_ckpt_" + std::to_string(getpid()) + "_0.bin";
  // Every rank gathers; rank 0 writes and shares the bytes (as fanstore-train does).
  const auto state = optimizer->whole_state();
  std::uint64_t size = 0;
  std::vector<char> bytes;
  if (world().rank() == 0) {
    save_checkpoint(path, *trained, *optimizer, {}, state, TrainingPosition{});
    bytes = read_checkpoint_file(path);
    std::filesystem::remove(path);
    size = bytes.size();
  }
  world().broadcast(&size, sizeof size, 0);
  bytes.resize(size);
  world().broadcast(bytes.data(), size, 0);

  for (bool shard : {false, true}) {
    auto resumed = small_model();
    auto again = make_optimizer(resumed->parameters(), o);
    if (shard) again->shard_over(world());
    restore_checkpoint(path, bytes, *resumed, *again);
    EXPECT_EQ(resumed->parameters().read(Arena::Values), trained->parameters().read(Arena::Values));
    EXPECT_EQ(again->steps_taken(), 2u);
    const auto restored = again->whole_state();
    for (std::size_t i = 0; i < state.size(); ++i) EXPECT_EQ(restored[i].second, state[i].second) << shard;
    // One more step from either matches one more step of the original.
    set_gradients(resumed->parameters(), 5);
    again->step(resumed->parameters(), 0.01f);
    auto reference = small_model();
    reference->parameters().write(Arena::Values, trained->parameters().read(Arena::Values));
    auto ref_opt = make_optimizer(reference->parameters(), o);
    restore_checkpoint(path, bytes, *reference, *ref_opt);
    set_gradients(reference->parameters(), 5);
    ref_opt->step(reference->parameters(), 0.01f);
    EXPECT_EQ(resumed->parameters().read(Arena::Values), reference->parameters().read(Arena::Values)) << shard;
  }
  if (world().size() > 1) {
    EXPECT_THROW(save_checkpoint(path, *trained, *optimizer, TrainingPosition{}), std::logic_error)
        << "sharded state is gathered by every rank first";
  }
}

// A gradient value that differs per rank and per arena position (exact in float, sums too).
float rank_gradient(int rank, std::size_t position) {
  return static_cast<float>(static_cast<int>((position * 7 + static_cast<std::size_t>(rank) * 13) % 61) - 30);
}

// Writes every layer's parameter gradients as backward would (rank_gradient of this world rank) and hands
// each layer to `gradients` as the backward hook does, last layer first. Layers named in `unwritten` get
// no gradient (backward did not reach them: they sum zeros), those in `unhooked` no hook (finish() sums them).
void run_backward(Model& m, GradientReduction& gradients, const std::set<std::string>& unwritten = {},
                  const std::set<std::string>& unhooked = {}) {
  ParameterTable& t = m.parameters();
  gradients.begin_step();
  for (NodeId id = m.output_node(); id >= 1; --id) {
    Layer& layer = *m.node_layer(id);
    if (unwritten.count(layer.name())) continue;
    for (auto h : layer.parameter_handles()) {
      Tensor g = t.gradient(h);
      for (std::int64_t i = 0; i < g.numel(); ++i)
        g[i] = rank_gradient(world().rank(), t.parameters()[h.index].offset + static_cast<std::size_t>(i));
    }
    if (!unhooked.count(layer.name())) gradients.on_layer_ready(layer);
  }
  gradients.finish();
}

// Whether arena position `i` belongs to a parameter of layer `name` (its parameters are "name.*").
bool of_layer(const ParameterTable& t, std::size_t i, const std::string& name) {
  for (const auto& e : t.parameters())
    if (i >= e.offset && i < e.offset + static_cast<std::size_t>(e.shape.numel()))
      return e.name.rfind(name + ".", 0) == 0;
  return false;
}

TEST(ShardedGradients, EachRankKeepsTheSumOfItsPartOnly) {
  auto m = small_model();
  ParameterTable& t = m->parameters();
  auto optimizer = make_optimizer(t, OptimizerOptions{});
  optimizer->shard_over(world());
  GradientReduceScatter gradients(world(), nullptr, t, optimizer->parts());
  const ArenaPart part = optimizer->part();
  ASSERT_EQ(t.gradient_part(), part);
  EXPECT_EQ(static_cast<std::size_t>(t.arena(Arena::Gradients).numel()), part.size());
  for (int step = 0; step < 2; ++step) {  // the second step reuses nothing of the first
    run_backward(*m, gradients);
    const std::vector<float> own = t.read(Arena::Gradients);
    for (std::size_t i = 0; i < own.size(); ++i) {
      float sum = 0;
      for (int r = 0; r < world().size(); ++r) sum += rank_gradient(r, part.begin + i);
      ASSERT_EQ(own[i], sum) << "position " << part.begin + i << " step " << step;
    }
  }
  EXPECT_EQ(gradients.started_during_backward(), t.parameters().size());
  // The optimizer steps on the part the table keeps and gathers the parts: every rank's values are whole,
  // each moved by the learning rate times its summed gradient (SGD's first step: the momentum is the gradient).
  const std::vector<float> before = t.read(Arena::Values);
  optimizer->step(t, 0.1f);
  const std::vector<float> after = t.read(Arena::Values);
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    float sum = 0;
    for (int r = 0; r < world().size(); ++r) sum += rank_gradient(r, i);
    ASSERT_NEAR(after[i], before[i] - 0.1f * sum, 1e-6f * std::max(1.f, std::fabs(before[i]))) << "position " << i;
  }
}

TEST(ShardedGradients, LargeTensorsGoInPiecesAcrossParts) {
  // A dense layer of 600 x 500 floats (2 pieces of 1 MiB, cut across the parts of 2, 3 or 4 ranks), a
  // layer backward never reached and one whose hook never came: every part still gets its exact sum.
  auto m = std::make_unique<Model>("large", make_cpu_backend({1}), Shape{1, 3, 6, 6});
  NodeId x = m->add<Convolution>({m->input()}, "conv", convolution_spec(2, 3, 4, 3, 1, 1, /*bias=*/true));
  x = m->add<Flatten>({x}, "flatten");
  x = m->add<Linear>({x}, "fc1", 4 * 6 * 6, 600);
  x = m->add<Linear>({x}, "fc2", 600, 500);
  m->finalize(x, 1);
  ParameterTable& t = m->parameters();
  ASSERT_GT(600u * 500u * sizeof(float), GradientReduceScatter::kPieceBytes) << "fc2's weight goes in two pieces";
  auto optimizer = make_optimizer(t, OptimizerOptions{});
  optimizer->shard_over(world());
  GradientReduceScatter gradients(world(), nullptr, t, optimizer->parts());
  run_backward(*m, gradients, {"conv"}, {"fc1"});
  const ArenaPart part = optimizer->part();
  const std::vector<float> own = t.read(Arena::Gradients);
  ASSERT_EQ(own.size(), part.size());
  for (std::size_t i = 0; i < own.size(); ++i) {
    const std::size_t position = part.begin + i;
    float sum = 0;
    if (!of_layer(t, position, "conv"))
      for (int r = 0; r < world().size(); ++r) sum += rank_gradient(r, position);
    ASSERT_EQ(own[i], sum) << "position " << position;
  }
}

TEST(ShardedGradients, ReplicaGroupsAverageTheirParts) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  // Two sample groups of size/2 ranks: a group's parts summed over it, then averaged over the groups.
  const int half = world().size() / 2;
  auto group = world().split(world().rank() / half, world().rank());
  auto replicas = world().split(world().rank() % half, world().rank());
  auto m = small_model();
  ParameterTable& t = m->parameters();
  auto optimizer = make_optimizer(t, OptimizerOptions{});
  optimizer->shard_over(*group);
  GradientReduceScatter gradients(*group, replicas.get(), t, optimizer->parts());
  run_backward(*m, gradients);
  const ArenaPart part = optimizer->part();
  const std::vector<float> own = t.read(Arena::Gradients);
  ASSERT_EQ(own.size(), part.size());
  for (std::size_t i = 0; i < own.size(); ++i) {
    float sum = 0;
    for (int r = 0; r < world().size(); ++r) sum += rank_gradient(r, part.begin + i);
    ASSERT_EQ(own[i], sum / 2) << "position " << part.begin + i;
  }
}

}  // namespace
}  // namespace fanstore::trainer
