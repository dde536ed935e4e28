// Tournament rounds (the partner's state travels while the own model is scored, then the partner's
// is scored on the same tournament set and the better one stays, the own one on a tie) and the
// tournament's part of a training run.
#include "tournament_run.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "metrics_log.hpp"
#include "trainer/data/subset_dataset.hpp"
#include "trainer/model_exchange.hpp"

namespace fanstore::trainer {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr std::size_t kFields = 11;  // a RoundRecord as doubles, for gather_records

}  // namespace

RoundRecord play_round(const TournamentPlan& plan, std::uint64_t seed, std::uint64_t round, Communicator& world,
                       Model& model, Optimizer& optimizer, const std::function<double()>& score) {
  const auto start = Clock::now();
  const int trainer = plan.trainer_of(world.rank()), local = world.rank() % plan.ranks_per_trainer;
  const auto peer_of = [&](int other) { return other * plan.ranks_per_trainer + local; };
  RoundRecord r;
  const auto timed_score = [&] {
    const auto t = Clock::now();
    const double v = score();
    r.score_s += seconds_since(t);
    return v;
  };
  const std::vector<float> own = capture_state(model, optimizer, plan.exchange_optimizer);
  std::vector<float> theirs(own.size());
  int send_to = -1, receive_from = -1;
  if (plan.strategy == TournamentStrategy::Pairwise) {
    r.partner = pairwise_partners(plan.trainers, seed, round)[static_cast<std::size_t>(trainer)];
    if (r.partner != trainer) send_to = receive_from = peer_of(r.partner);
  } else {
    // Truncation ranks every trainer by its own model's score, so the scores come first.
    r.own_score = timed_score();
    const std::vector<double> scores = gather_per_trainer(plan, world, {r.own_score});
    const auto source = truncation_sources(scores, plan.metric, plan.truncate);
    r.partner = source[static_cast<std::size_t>(trainer)];
    r.partner_score = scores[static_cast<std::size_t>(r.partner)];
    if (r.partner != trainer) receive_from = peer_of(r.partner);
    for (int t = 0; t < plan.trainers; ++t)
      if (t != trainer && source[static_cast<std::size_t>(t)] == trainer) send_to = peer_of(t);
  }
  StateTransfer transfer(world, send_to, own, receive_from, theirs);
  if (plan.strategy == TournamentStrategy::Pairwise) r.own_score = timed_score();  // while the state travels
  const auto wait_start = Clock::now();
  transfer.wait();
  r.transfer_s = seconds_since(wait_start);
  r.state_bytes = static_cast<double>(((send_to >= 0) + (receive_from >= 0)) * own.size() * sizeof(float));
  if (receive_from >= 0) {
    install_state(theirs, model, optimizer, plan.exchange_optimizer);
    if (plan.strategy == TournamentStrategy::Pairwise) {
      r.partner_score = timed_score();
      r.kept_own = !score_beats(r.partner_score, r.own_score, plan.metric);
      if (r.kept_own) install_state(own, model, optimizer, plan.exchange_optimizer);
    } else {
      r.kept_own = false;  // truncation replaces the worst unconditionally
    }
  } else if (plan.strategy == TournamentStrategy::Pairwise) {
    r.partner_score = r.own_score;  // it played itself
  }
  r.hash = state_hash(r.kept_own ? own : theirs);
  r.round_s = seconds_since(start);
  return r;
}

std::vector<double> gather_per_trainer(const TournamentPlan& plan, Communicator& world,
                                       const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * static_cast<std::size_t>(plan.trainers), 0.0);
  if (world.rank() % plan.ranks_per_trainer == 0)
    std::copy(mine.begin(), mine.end(),
              all.begin() + static_cast<std::ptrdiff_t>(mine.size()) * plan.trainer_of(world.rank()));
  world.sum(all.data(), all.size());  // NaN + 0 stays NaN: a NaN score survives in its own slot
  return all;
}

std::vector<RoundRecord> gather_records(const TournamentPlan& plan, Communicator& world, const RoundRecord& mine) {
  const std::vector<double> all = gather_per_trainer(
      plan, world,
      {static_cast<double>(mine.partner), mine.own_score, mine.partner_score, mine.kept_own ? 1.0 : 0.0, mine.lr_scale,
       mine.transfer_s, mine.round_s, mine.state_bytes, static_cast<double>(mine.hash >> 32),
       static_cast<double>(mine.hash & 0xFFFFFFFFu), mine.score_s});
  std::vector<RoundRecord> records(static_cast<std::size_t>(plan.trainers));
  for (std::size_t t = 0; t < records.size(); ++t) {
    const double* f = &all[kFields * t];
    RoundRecord& r = records[t];
    r.partner = static_cast<int>(f[0]);
    r.own_score = f[1];
    r.partner_score = f[2];
    r.kept_own = f[3] != 0;
    r.lr_scale = f[4];
    r.transfer_s = f[5];
    r.round_s = f[6];
    r.state_bytes = f[7];
    r.hash = (static_cast<std::uint64_t>(f[8]) << 32) | static_cast<std::uint64_t>(f[9]);
    r.score_s = f[10];
  }
  return records;
}

namespace {

// The JSON record of trainer t in round `round` (docs/training.md, "Tournament training").
std::string round_json(std::uint64_t round, std::uint64_t step, int t, const RoundRecord& r, double lr_scale_after,
                       TournamentMetric metric) {
  std::ostringstream s;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(r.hash));
  s << "{\"event\":\"tournament\",\"round\":" << round << ",\"step\":" << step << ",\"trainer\":" << t
    << ",\"partner\":" << r.partner << ",\"metric\":\"" << metric_label(metric)
    << "\",\"own_score\":" << json_number(r.own_score) << ",\"partner_score\":" << json_number(r.partner_score)
    << ",\"winner\":" << (r.kept_own ? t : r.partner) << ",\"kept\":\"" << (r.kept_own ? "own" : "partner")
    << "\",\"lr_scale\":" << json_number(lr_scale_after) << ",\"state_hash\":\"" << hash
    << "\",\"state_bytes\":" << json_number(r.state_bytes) << ",\"transfer_s\":" << json_number(r.transfer_s)
    << ",\"score_s\":" << json_number(r.score_s) << ",\"round_s\":" << json_number(r.round_s) << "}";
  return s.str();
}

}  // namespace

Tournament::Tournament(const TournamentPlan& plan, Communicator& world, std::uint64_t seed)
    : plan_(plan), world_(world), seed_(seed), trainer_(plan.trainer_of(world.rank())) {
  if (enabled()) comm_ = world.split(trainer_, world.rank());
}

Tournament::~Tournament() = default;

void Tournament::agree_on_grid(ResolvedGrid& resolved) {
  if (!enabled()) return;
  std::int64_t shape[5] = {resolved.batch_per_group, resolved.shape.samples, 1, 1, 1};
  for (std::size_t i = 0; i < resolved.shape.spatial.size() && i < 3; ++i) shape[2 + i] = resolved.shape.spatial[i];
  world_.broadcast(shape, sizeof shape, 0);
  const GridShape own = resolved.shape;
  resolved.batch_per_group = shape[0];
  resolved.shape.samples = static_cast<int>(shape[1]);
  for (std::size_t i = 0; i < resolved.shape.spatial.size() && i < 3; ++i)
    resolved.shape.spatial[i] = static_cast<int>(shape[2 + i]);
  // The layers this trainer's model chose to run as one kernel were chosen for its own grid.
  if (!(resolved.shape == own)) resolved.one_kernel_layers.clear();
}

void Tournament::split_samples(std::unique_ptr<data::SampleDataset>& train_set, std::size_t per_step) {
  if (!enabled()) return;
  std::shared_ptr<const data::SampleDataset> all(std::move(train_set));
  auto samples = trainer_samples(all->size(), plan_.trainers, trainer_, plan_.fraction, per_step, seed_);
  tournament_set_ = std::make_unique<data::SubsetDataset>(all, std::move(samples.tournament));
  train_set = std::make_unique<data::SubsetDataset>(all, std::move(samples.train));
}

std::vector<double> Tournament::per_trainer(const std::vector<double>& mine) {
  return enabled() ? gather_per_trainer(plan_, world_, mine) : mine;
}

Tournament::Round Tournament::play_if_due(std::uint64_t step, double lr_scale, Model& model, Optimizer& optimizer,
                                          const std::function<double()>& score) {
  Round out;
  out.lr_scale = lr_scale;
  const auto interval = static_cast<std::uint64_t>(plan_.interval);
  if (!enabled() || step % interval != 0) return out;
  const std::uint64_t round = step / interval;
  RoundRecord mine = play_round(plan_, seed_, round, world_, model, optimizer, score);
  mine.lr_scale = lr_scale;
  const auto records = gather_records(plan_, world_, mine);
  ++rounds_;
  round_s_ += mine.round_s;
  exchange_s_ += mine.round_s - mine.score_s;
  state_bytes_ += mine.state_bytes;
  // A trainer that took the winner's model takes its learning rate too (times a mutation).
  const auto lr_scale_after = [&](int t) {
    const RoundRecord& r = records[static_cast<std::size_t>(t)];
    return r.kept_own ? r.lr_scale
                      : records[static_cast<std::size_t>(r.partner)].lr_scale *
                            mutation_factor(plan_.lr_factors, seed_, round, t);
  };
  out.played = true;
  out.took_other = !mine.kept_own;
  out.lr_scale = lr_scale_after(trainer_);
  for (int t = 0; t < plan_.trainers; ++t)
    out.records.push_back(
        round_json(round, step, t, records[static_cast<std::size_t>(t)], lr_scale_after(t), plan_.metric));
  return out;
}

int Tournament::choose_best(double my_score, TournamentMetric by) {
  finals_ = per_trainer({my_score});
  best_ = 0;
  for (int t = 1; t < plan_.trainers; ++t)
    if (score_beats(finals_[static_cast<std::size_t>(t)], finals_[static_cast<std::size_t>(best_)], by)) best_ = t;
  if (enabled()) {
    double totals[3] = {round_s_, exchange_s_, state_bytes_};
    world_.max(totals, 2);  // the slowest rank's rounds
    world_.sum(totals + 2, 1);
    round_s_ = totals[0];
    exchange_s_ = totals[1];
    state_bytes_ = totals[2];
  }
  return best_;
}

std::string Tournament::summary_text(const std::string& by_name, double run_s) const {
  std::ostringstream s;
  s << "trainers " << plan_.trainers << " (best " << best_ << " by " << by_name << ":";
  for (double f : finals_) s << " " << f;
  s << ")  tournament rounds " << rounds_ << " (" << round_s_ << " s, "
    << (run_s > 0 ? std::round(1000 * round_s_ / run_s) / 10 : 0) << "% of the run; exchange " << exchange_s_
    << " s, the rest scoring)";
  return s.str();
}

std::string Tournament::summary_json() const {
  std::ostringstream j;
  j << "\"trainers\":" << plan_.trainers << ",\"best_trainer\":" << best_ << ",\"trainer_scores\":[";
  for (std::size_t t = 0; t < finals_.size(); ++t) j << (t ? "," : "") << json_number(finals_[t]);
  j << "],\"tournament_rounds\":" << rounds_ << ",\"tournament_s\":" << json_number(round_s_)
    << ",\"tournament_exchange_s\":" << json_number(exchange_s_)
    << ",\"tournament_state_bytes\":" << json_number(state_bytes_);
  return j.str();
}

}  // namespace fanstore::trainer
