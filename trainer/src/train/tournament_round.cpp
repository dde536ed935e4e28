// A tournament round: the partner's state travels while the own model is scored, then the partner's
// is scored on the same tournament set and the better one stays (the own one on a tie).
#include "tournament_round.hpp"

#include <chrono>

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

std::vector<double> gather_per_trainer(const TournamentPlan& plan, Communicator& world, const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * static_cast<std::size_t>(plan.trainers), 0.0);
  if (world.rank() % plan.ranks_per_trainer == 0)
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(mine.size()) * plan.trainer_of(world.rank()));
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

}  // namespace fanstore::trainer
