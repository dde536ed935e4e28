// One tournament round as this rank plays it: meet the partner trainer (pairwise) or the ranking
// (truncation), swap state rank to rank over the world communicator, score, keep the winner.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "trainer/distributed.hpp"
#include "trainer/model.hpp"
#include "trainer/optim.hpp"
#include "trainer/tournament.hpp"

namespace fanstore::trainer {

// One trainer's round, as recorded in metrics.jsonl.
struct RoundRecord {
  int partner = -1;  // the trainer met (pairwise) or copied (truncation); itself: no exchange
  double own_score = std::numeric_limits<double>::quiet_NaN();
  double partner_score = std::numeric_limits<double>::quiet_NaN();
  bool kept_own = true;
  double lr_scale = 1;        // before the round (the caller fills it)
  double transfer_s = 0;      // waiting for the partner's state after scoring the own model
  double score_s = 0;         // scoring models on the tournament set
  double round_s = 0;         // everything: round_s - score_s is the exchange's own cost
  double state_bytes = 0;     // sent plus received by this rank
  std::uint64_t hash = 0;     // of this rank's state after the round
};

// `score` scores the model as it stands on this trainer's tournament set (collective over the
// trainer's ranks, the same value on each). Collective over `world`.
RoundRecord play_round(const TournamentPlan& plan, std::uint64_t seed, std::uint64_t round, Communicator& world,
                       Model& model, Optimizer& optimizer, const std::function<double()>& score);

// Every trainer's values (its first rank's `mine`), trainer after trainer, on every rank of `world`.
std::vector<double> gather_per_trainer(const TournamentPlan& plan, Communicator& world, const std::vector<double>& mine);

// Every trainer's record (its first rank's), on every rank of `world`.
std::vector<RoundRecord> gather_records(const TournamentPlan& plan, Communicator& world, const RoundRecord& mine);

}  // namespace fanstore::trainer
