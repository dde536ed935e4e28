// The tournament as the training loop runs it: this rank's trainer and its communicator, its share of
// the samples, the rounds (meet the partner or the ranking, swap state rank to rank over the world
// communicator, score, keep the winner), their records, and the best trainer at the end.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data/sample_dataset.hpp"
#include "trainer/distributed.hpp"
#include "trainer/distributed_commands.hpp"
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
  double lr_scale = 1;     // before the round (the caller fills it)
  double transfer_s = 0;   // waiting for the partner's state after scoring the own model
  double score_s = 0;      // scoring models on the tournament set
  double round_s = 0;      // everything: round_s - score_s is the exchange's own cost
  double state_bytes = 0;  // sent plus received by this rank
  std::uint64_t hash = 0;  // of this rank's state after the round
};

// `score` scores the model as it stands on this trainer's tournament set (collective over the
// trainer's ranks, the same value on each). Collective over `world`.
RoundRecord play_round(const TournamentPlan& plan, std::uint64_t seed, std::uint64_t round, Communicator& world,
                       Model& model, Optimizer& optimizer, const std::function<double()>& score);

// Every trainer's values (its first rank's `mine`), trainer after trainer, on every rank of `world`.
std::vector<double> gather_per_trainer(const TournamentPlan& plan, Communicator& world,
                                       const std::vector<double>& mine);

// Every trainer's record (its first rank's), on every rank of `world`.
std::vector<RoundRecord> gather_records(const TournamentPlan& plan, Communicator& world, const RoundRecord& mine);

// Without a tournament (one trainer) it stands aside: the world is the trainer, nothing is gathered.
class Tournament {
 public:
  // Collective over `world` with more than one trainer (splits it into the trainers' communicators).
  Tournament(const TournamentPlan& plan, Communicator& world, std::uint64_t seed);
  ~Tournament();

  bool enabled() const { return plan_.enabled(); }
  const TournamentPlan& plan() const { return plan_; }
  int trainer() const { return trainer_; }
  Communicator& trainer_comm() { return comm_ ? *comm_ : world_; }

  // Trainers step together and swap whole models: with --grid auto every trainer takes trainer 0's
  // measured choice.
  void agree_on_grid(ResolvedGrid& resolved);

  // Replaces `train_set` by this trainer's training share and keeps its tournament set, whole
  // batches of `per_step` (the trainer's global batch).
  void split_samples(std::unique_ptr<data::SampleDataset>& train_set, std::size_t per_step);
  const data::SampleDataset& tournament_set() const { return *tournament_set_; }

  // Every trainer's `mine`, trainer by trainer (one entry per value and trainer); just `mine` alone.
  std::vector<double> per_trainer(const std::vector<double>& mine);

  // The round due after `step`, if one is: played, its records gathered and formatted for
  // metrics.jsonl, and this trainer's learning-rate scale after it (the winner's, times a mutation,
  // when it took another's model).
  struct Round {
    bool played = false, took_other = false;
    double lr_scale = 1;
    std::vector<std::string> records;  // one JSON object per trainer
  };
  Round play_if_due(std::uint64_t step, double lr_scale, Model& model, Optimizer& optimizer,
                    const std::function<double()>& score);

  // The best trainer by `by` of every trainer's `my_score`; collective over the world.
  int choose_best(double my_score, TournamentMetric by);
  // For the summary (after choose_best): the text and the JSON fields, without a leading separator.
  std::string summary_text(const std::string& by_name, double run_s) const;
  std::string summary_json() const;
  const std::vector<double>& final_scores() const { return finals_; }

 private:
  TournamentPlan plan_;
  Communicator& world_;
  std::uint64_t seed_;
  int trainer_ = 0;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<data::SampleDataset> tournament_set_;
  std::uint64_t rounds_ = 0;
  double round_s_ = 0, exchange_s_ = 0, state_bytes_ = 0;  // this rank's, then (choose_best) the world's
  int best_ = 0;
  std::vector<double> finals_;
};

}  // namespace fanstore::trainer
