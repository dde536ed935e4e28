// Tournament training (LTFB, Jacobs et al.; docs/training.md, "Tournament training"): K trainers,
// each a contiguous block of ranks, train on disjoint shards and every N steps meet in pairs, score
// both models on their own tournament set and keep the better one. This header is the arithmetic
// every rank must agree on without messages: the options, the pairing, the sample split, the scores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/metrics.hpp"

namespace fanstore::trainer {

// As given on the command line (fanstore-train --trainers ...).
struct TournamentOptions {
  int trainers = 1;
  std::int64_t interval = 100;  // --ltfb-interval: steps between rounds
  double fraction = 0.1;        // --tournament-fraction of each trainer's samples
  std::string metric = "loss";  // --tournament-metric
  std::string exchange = "weights+optimizer";
  std::string strategy = "pairwise";  // pairwise or truncation[:k]
  std::string mutate;                 // "" (none), "lr" (default factors) or "lr=F1,F2,..."
};

enum class TournamentMetric { Loss, Accuracy, Dice, Mae };
enum class TournamentStrategy { Pairwise, Truncation };

// The checked options. `trainers` == 1 is the plain run: no tournament, no split.
struct TournamentPlan {
  int trainers = 1;
  int ranks_per_trainer = 1;
  std::int64_t interval = 100;
  double fraction = 0.1;
  TournamentMetric metric = TournamentMetric::Loss;
  bool exchange_optimizer = true;
  TournamentStrategy strategy = TournamentStrategy::Pairwise;
  int truncate = 1;                // truncation: the worst k take the best k's models
  std::vector<double> lr_factors;  // empty: no mutation

  bool enabled() const { return trainers > 1; }
  int trainer_of(int world_rank) const { return world_rank / ranks_per_trainer; }
};

inline const std::vector<double> kDefaultLrFactors = {0.8, 1.25};

// Checks every option against the model's task and the number of ranks; throws std::invalid_argument
// with one line saying what to pass instead.
TournamentPlan parse_tournament(const TournamentOptions& options, TaskKind task, int world_size);

std::string metric_label(TournamentMetric metric);  // "loss", "accuracy", "dice" or "mae"
bool higher_is_better(TournamentMetric metric);
// True when score `a` is strictly better than `b`. NaN is worse than any number and ties nothing.
bool score_beats(double a, double b, TournamentMetric metric);

// Round `round`'s partner of every trainer (partner[t] == t: it plays itself). Every rank shuffles
// the trainers with the same stream (seed, round) and pairs neighbours, as LBANN's
// random_pairwise_exchange does, so all agree with no messages; with an odd count the last plays itself.
std::vector<int> pairwise_partners(int trainers, std::uint64_t seed, std::uint64_t round);

// Truncation selection: source[t] is the trainer whose model t takes (t itself: keeps its own). The
// i-th worst of `scores` takes the i-th best's model, for i < k; ties go to the lower trainer index.
std::vector<int> truncation_sources(const std::vector<double>& scores, TournamentMetric metric, int k);

// A trainer's samples: the dataset permuted once with `seed`, cut into `trainers` contiguous parts of
// floor(N / trainers) (equal, so that every trainer runs the same number of steps); the
// first part of trainer t's share is its tournament set, `fraction` of it rounded up to whole `unit`s
// (its sample groups x batch, so that scoring needs no padded batch), the rest its training set.
// Throws std::invalid_argument when the tournament set or the training set would be empty.
struct TrainerSamples {
  std::vector<std::size_t> train, tournament;
};
TrainerSamples trainer_samples(std::size_t dataset_size, int trainers, int trainer, double fraction, std::size_t unit,
                               std::uint64_t seed);

// The learning-rate factor a trainer that lost round `round` applies on top of the winner's: one of
// `factors`, drawn from the stream (seed, round, trainer). 1 without factors.
double mutation_factor(const std::vector<double>& factors, std::uint64_t seed, std::uint64_t round, int trainer);

}  // namespace fanstore::trainer
