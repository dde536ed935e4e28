// Tournament training's shared arithmetic (pairing, truncation, sample split, mutation, option
// checks) and the model state that partners swap (capture/install round trip, hash, v2 checkpoints).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "small_models.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/model_exchange.hpp"
#include "trainer/models.hpp"
#include "trainer/tournament.hpp"

namespace fanstore::trainer {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Tournament, PairsAreSymmetricAndCoverEveryTrainer) {
  for (int k : {2, 3, 4, 5, 8}) {
    for (std::uint64_t round = 1; round <= 20; ++round) {
      const auto p = pairwise_partners(k, 9, round);
      ASSERT_EQ(p.size(), static_cast<std::size_t>(k));
      int alone = 0;
      for (int t = 0; t < k; ++t) {
        const int q = p[static_cast<std::size_t>(t)];
        ASSERT_GE(q, 0);
        ASSERT_LT(q, k);
        EXPECT_EQ(p[static_cast<std::size_t>(q)], t) << "pairing is not symmetric";
        alone += q == t;
      }
      EXPECT_EQ(alone, k % 2) << "exactly one trainer plays itself when K is odd, none otherwise";
      EXPECT_EQ(p, pairwise_partners(k, 9, round)) << "every rank computes the same pairs";
    }
  }
}

TEST(Tournament, PairsChangeBetweenRoundsAndSeeds) {
  std::set<std::vector<int>> seen;
  for (std::uint64_t round = 1; round <= 30; ++round) seen.insert(pairwise_partners(6, 1, round));
  EXPECT_GT(seen.size(), 5u) << "6 trainers have 15 pairings; 30 rounds should meet many of them";
  std::set<int> alone;  // with 3 trainers, each should sit out some round
  for (std::uint64_t round = 1; round <= 30; ++round) {
    const auto p = pairwise_partners(3, 1, round);
    for (int t = 0; t < 3; ++t)
      if (p[static_cast<std::size_t>(t)] == t) alone.insert(t);
  }
  EXPECT_EQ(alone.size(), 3u);
}

TEST(Tournament, ScoresNaNNeverWinsAndTiesKeepOwn) {
  EXPECT_TRUE(score_beats(0.1, 0.2, TournamentMetric::Loss));
  EXPECT_FALSE(score_beats(0.2, 0.1, TournamentMetric::Loss));
  EXPECT_TRUE(score_beats(0.9, 0.8, TournamentMetric::Accuracy));
  EXPECT_FALSE(score_beats(0.5, 0.5, TournamentMetric::Accuracy)) << "a tie is not a win";
  EXPECT_FALSE(score_beats(kNaN, 0.5, TournamentMetric::Loss));
  EXPECT_TRUE(score_beats(7.0, kNaN, TournamentMetric::Loss));
  EXPECT_FALSE(score_beats(kNaN, kNaN, TournamentMetric::Dice));
}

TEST(Tournament, TruncationReplacesTheWorstByTheBest) {
  // Losses: trainer 2 best, then 0, 3, 1 (worst), 4 NaN (worse than any number).
  const std::vector<double> loss = {0.3, 0.9, 0.1, 0.5, kNaN};
  auto s = truncation_sources(loss, TournamentMetric::Loss, 1);
  EXPECT_EQ(s, (std::vector<int>{0, 1, 2, 3, 2}));
  s = truncation_sources(loss, TournamentMetric::Loss, 2);
  EXPECT_EQ(s, (std::vector<int>{0, 0, 2, 3, 2}));
  s = truncation_sources({0.5, 0.5, 0.5, 0.5}, TournamentMetric::Accuracy, 1);
  EXPECT_EQ(s, (std::vector<int>{0, 1, 2, 0})) << "ties go to the lower trainer index";
}

TEST(Tournament, TrainerSamplesAreDisjointEqualAndWholeBatches) {
  const std::size_t n = 103;
  std::vector<int> owner(n, -1);
  for (int t = 0; t < 3; ++t) {
    const auto s = trainer_samples(n, 3, t, 0.1, 4, 5);
    EXPECT_EQ(s.tournament.size() % 4, 0u) << "the tournament set is whole batches";
    EXPECT_GE(s.tournament.size(), 4u);
    for (const auto* part : {&s.tournament, &s.train})
      for (std::size_t i : *part) {
        ASSERT_LT(i, n);
        EXPECT_EQ(owner[i], -1) << "sample " << i << " is in two sets";
        owner[i] = t;
      }
  }
  EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 1) << "103 = 3 x 34 + 1: all but the remainder are somebody's";
  EXPECT_EQ(trainer_samples(n, 3, 0, 0.1, 4, 5).train.size(), trainer_samples(n, 3, 2, 0.1, 4, 5).train.size())
      << "equal shares: every trainer runs the same number of steps";
  EXPECT_EQ(trainer_samples(n, 3, 1, 0.1, 4, 5).train, trainer_samples(n, 3, 1, 0.1, 4, 5).train);
  // The split is a shuffle: an image folder's samples are sorted by class.
  const auto s0 = trainer_samples(n, 3, 0, 0.1, 4, 5);
  EXPECT_GT(*std::max_element(s0.train.begin(), s0.train.end()), n / 2);
}

TEST(Tournament, TooFewSamplesIsOneLine) {
  try {
    trainer_samples(10, 2, 1, 0.5, 4, 1);
    FAIL() << "accepted 5 samples for a tournament set of 4 and a step of 4";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("trainer 1 has 5 of the 10 training samples"), std::string::npos) << e.what();
  }
}

TEST(Tournament, MutationDrawsFromTheFactors) {
  EXPECT_EQ(mutation_factor({}, 1, 2, 3), 1.0);
  std::set<double> drawn;
  for (std::uint64_t round = 0; round < 40; ++round) drawn.insert(mutation_factor(kDefaultLrFactors, 1, round, 0));
  EXPECT_EQ(drawn, (std::set<double>{0.8, 1.25}));
  EXPECT_EQ(mutation_factor(kDefaultLrFactors, 1, 7, 2), mutation_factor(kDefaultLrFactors, 1, 7, 2));
}

std::string parse_error(TournamentOptions o, TaskKind task = TaskKind::Regression, int ranks = 4) {
  try {
    parse_tournament(o, task, ranks);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Tournament, OptionsParseAndBadOnesSayWhatToPass) {
  TournamentOptions o;
  o.trainers = 2;
  o.strategy = "truncation:1";
  o.mutate = "lr=0.5,2";
  o.metric = "accuracy";
  const TournamentPlan p = parse_tournament(o, TaskKind::Classification, 6);
  EXPECT_EQ(p.ranks_per_trainer, 3);
  EXPECT_EQ(p.trainer_of(4), 1);
  EXPECT_EQ(p.strategy, TournamentStrategy::Truncation);
  EXPECT_EQ(p.lr_factors, (std::vector<double>{0.5, 2}));
  EXPECT_EQ(p.metric, TournamentMetric::Accuracy);
  o = {};
  o.mutate = "lr";
  EXPECT_EQ(parse_tournament(o, TaskKind::Regression, 1).lr_factors, kDefaultLrFactors);

  o = {};
  o.trainers = 3;
  EXPECT_EQ(parse_error(o),
            "--trainers 3 does not divide the 4 ranks: start a multiple of 3 ranks or pass a divisor of 4");
  o = {};
  o.metric = "accuracy";
  EXPECT_EQ(parse_error(o), "--tournament-metric accuracy: this model does not produce it; pass loss or mae");
  o = {};
  o.fraction = 0;
  EXPECT_NE(parse_error(o).find("leaves no tournament set"), std::string::npos);
  o = {};
  o.trainers = 4;
  o.strategy = "truncation:3";
  EXPECT_NE(parse_error(o).find("at most half of the 4 trainers"), std::string::npos);
  for (const char* s : {"truncation:", "truncation:x", "truncation3", "tree"}) {
    o = {};
    o.strategy = s;
    EXPECT_NE(parse_error(o).find("--ltfb-strategy"), std::string::npos) << s;
  }
  for (const char* m : {"momentum=2", "lr=", "lr=0.5,-1", "lr=abc"}) {
    o = {};
    o.mutate = m;
    EXPECT_NE(parse_error(o).find("--ltfb-mutate"), std::string::npos) << m;
  }
  o = {};
  o.exchange = "gradients";
  EXPECT_EQ(parse_error(o), "--ltfb-exchange gradients: pass weights or weights+optimizer");
  o = {};
  o.interval = 0;
  EXPECT_NE(parse_error(o).find("--ltfb-interval 0"), std::string::npos);
}

std::unique_ptr<Optimizer> adam_after_steps(Model& m, int steps) {
  OptimizerOptions oo;
  oo.kind = "adam";
  auto opt = make_optimizer(m.parameters(), oo);
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < m.parameters().parameter_count(); ++i)
      m.parameters().gradients()[i] = 1e-3f * static_cast<float>((i + static_cast<std::size_t>(s)) % 7);
    opt->step(m.parameters(), 0.01f);
  }
  return opt;
}

TEST(ModelExchange, InstallMakesTheStateBitIdentical) {
  auto a = small_cosmoflow(1), b = small_cosmoflow(2);
  auto oa = adam_after_steps(*a, 3), ob = adam_after_steps(*b, 1);
  const auto sa = capture_state(*a, *oa, true);
  EXPECT_NE(state_hash(sa), state_hash(capture_state(*b, *ob, true)));
  install_state(sa, *b, *ob, true);
  EXPECT_EQ(ob->steps_taken(), 3u) << "Adam's step count travels with its moments";
  EXPECT_EQ(capture_state(*b, *ob, true), sa);
  EXPECT_EQ(state_hash(capture_state(*b, *ob, true)), state_hash(sa));

  // Weights only: the optimizer state stays the receiver's.
  auto c = small_cosmoflow(3);
  auto oc = adam_after_steps(*c, 1);
  const auto moments_before = capture_state(*c, *oc, true);
  install_state(capture_state(*a, *oa, false), *c, *oc, false);
  const auto after = capture_state(*c, *oc, true);
  const std::size_t weights = a->parameters().parameter_count() + a->parameters().buffer_count();
  EXPECT_TRUE(std::equal(after.begin(), after.begin() + static_cast<std::ptrdiff_t>(weights), sa.begin()));
  EXPECT_TRUE(std::equal(after.begin() + static_cast<std::ptrdiff_t>(weights), after.end(),
                         moments_before.begin() + static_cast<std::ptrdiff_t>(weights)));
  EXPECT_EQ(oc->steps_taken(), 1u);

  EXPECT_THROW(install_state(std::vector<float>(5), *c, *oc, true), std::invalid_argument);
}

TEST(ModelExchange, CheckpointKeepsTheLearningRateScaleAndReadsVersions2And3) {
  auto a = small_cosmoflow(1);
  auto oa = adam_after_steps(*a, 1);
  TrainingPosition p{7, 2, 3, 42, 2, 8, 1.25};
  const auto dir = std::filesystem::temp_directory_path() / ("fanstore_ltfb_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "checkpoint.bin").string();
  save_checkpoint(path, *a, *oa, p);
  EXPECT_EQ(load_checkpoint(path, *a, *oa).lr_scale, 1.25);

  // Older files, cut out of this one: version 3 has no layer shapes, version 2 no shapes and no scale; each
  // with its own checksum.
  const std::vector<char> v4 = read_checkpoint_file(path);
  auto u64_at = [&](std::size_t at) {
    std::uint64_t n;
    std::memcpy(&n, v4.data() + at, 8);
    return static_cast<std::size_t>(n);
  };
  const std::size_t shapes_at = 8 + 4 + 8 + u64_at(12) + 8;  // after the model string and the table signature
  std::size_t optimizer_at = shapes_at + 8;
  for (std::size_t i = 0, count = u64_at(shapes_at); i < count; ++i) {  // name, rank, dims
    optimizer_at += 8 + u64_at(optimizer_at);
    optimizer_at += 8 + 8 * u64_at(optimizer_at);
  }
  const std::size_t scale_at = optimizer_at + 8 + u64_at(optimizer_at) + 6 * 8;
  auto older = [&](std::uint32_t version) {
    auto at = [&](std::size_t offset) { return v4.begin() + static_cast<std::ptrdiff_t>(offset); };
    std::vector<char> v(v4.begin(), at(shapes_at));
    v.insert(v.end(), at(optimizer_at), at(version >= 3 ? scale_at + 8 : scale_at));
    v.insert(v.end(), at(scale_at + 8), v4.end() - 8);
    std::memcpy(v.data() + 8, &version, 4);
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (char c : v) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    v.insert(v.end(), reinterpret_cast<const char*>(&h), reinterpret_cast<const char*>(&h) + 8);
    return v;
  };
  const TrainingPosition q2 = restore_checkpoint("v2.bin", older(2), *a, *oa);
  EXPECT_EQ(q2.global_step, 7u);
  EXPECT_EQ(q2.lr_scale, 1.0);
  const TrainingPosition q3 = restore_checkpoint("v3.bin", older(3), *a, *oa);
  EXPECT_EQ(q3.global_step, 7u);
  EXPECT_EQ(q3.next_batch, 3u);
  EXPECT_EQ(q3.lr_scale, 1.25);

  // A version 3 file has no shapes to name the layer that differs: the message says what may differ instead.
  ModelOptions other;
  other.batch = 1;
  other.input_size = 64;
  auto wide = build_model("cosmoflow", make_cpu_backend({1}), other);
  auto ow = adam_after_steps(*wide, 0);
  try {
    restore_checkpoint("v3.bin", older(3), *wide, *ow);
    ADD_FAILURE() << "a version 3 checkpoint of 32^3 loaded into a 64^3 model";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("its layer shapes are not this model's"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fanstore::trainer
