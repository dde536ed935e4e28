// The tournament's shared arithmetic: option checks, pairing, truncation, sample split, mutation.
#include "trainer/tournament.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "trainer/data/shard.hpp"
#include "trainer/random.hpp"

namespace fanstore::trainer {
namespace {

// Stream names, so that no two uses of the seed draw the same numbers.
constexpr std::uint64_t kPairingStream = 0x4C5446425041ull;   // "LTFBPA"
constexpr std::uint64_t kMutationStream = 0x4C5446424D55ull;  // "LTFBMU"
constexpr std::uint64_t kSplitEpoch = ~std::uint64_t{0};      // the split's permutation: no training epoch

[[noreturn]] void bad(const std::string& line) { throw std::invalid_argument(line); }

std::vector<double> parse_factors(const std::string& text) {
  if (text == "lr") return kDefaultLrFactors;
  if (text.rfind("lr=", 0) != 0)
    bad("--ltfb-mutate " + text + ": only the learning rate mutates; pass lr or lr=F1,F2,... (e.g. lr=0.8,1.25)");
  std::vector<double> factors;
  std::istringstream in(text.substr(3));
  for (std::string item; std::getline(in, item, ',');) {
    std::size_t used = 0;
    double f = 0;
    try {
      f = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(f > 0) || !std::isfinite(f))
      bad("--ltfb-mutate " + text + ": '" + item + "' is not a positive factor; pass lr=F1,F2,... (e.g. lr=0.8,1.25)");
    factors.push_back(f);
  }
  if (factors.empty()) bad("--ltfb-mutate " + text + ": no factors; pass lr=F1,F2,... (e.g. lr=0.8,1.25)");
  return factors;
}

}  // namespace

std::string metric_label(TournamentMetric metric) {
  switch (metric) {
    case TournamentMetric::Loss: return "loss";
    case TournamentMetric::Accuracy: return "accuracy";
    case TournamentMetric::Dice: return "dice";
    case TournamentMetric::Mae: return "mae";
  }
  return "";
}

bool higher_is_better(TournamentMetric metric) {
  return metric == TournamentMetric::Accuracy || metric == TournamentMetric::Dice;
}

bool score_beats(double a, double b, TournamentMetric metric) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return higher_is_better(metric) ? a > b : a < b;
}

TournamentPlan parse_tournament(const TournamentOptions& o, TaskKind task, int world_size) {
  TournamentPlan p;
  if (o.trainers < 1) bad("--trainers " + std::to_string(o.trainers) + ": pass 1 or more");
  if (world_size % o.trainers != 0)
    bad("--trainers " + std::to_string(o.trainers) + " does not divide the " + std::to_string(world_size) +
        " ranks: start a multiple of " + std::to_string(o.trainers) + " ranks or pass a divisor of " +
        std::to_string(world_size));
  p.trainers = o.trainers;
  p.ranks_per_trainer = world_size / o.trainers;
  if (o.interval < 1) bad("--ltfb-interval " + std::to_string(o.interval) + ": pass a number of steps >= 1");
  p.interval = o.interval;
  if (!(o.fraction > 0 && o.fraction < 1)) {
    std::ostringstream given;  // as typed: 0, not to_string's 0.000000
    given << o.fraction;
    bad("--tournament-fraction " + given.str() +
        " leaves no tournament set or no training set: pass a fraction between 0 and 1 (e.g. 0.1)");
  }
  p.fraction = o.fraction;
  const std::string model_metric = task == TaskKind::Classification ? "accuracy"
                                   : task == TaskKind::Segmentation ? "dice"
                                                                    : "mae";
  if (o.metric == "loss") p.metric = TournamentMetric::Loss;
  else if (o.metric == model_metric)
    p.metric = task == TaskKind::Classification ? TournamentMetric::Accuracy
               : task == TaskKind::Segmentation ? TournamentMetric::Dice
                                                : TournamentMetric::Mae;
  else if (o.metric == "accuracy" || o.metric == "dice" || o.metric == "mae")
    bad("--tournament-metric " + o.metric + ": this model does not produce it; pass loss or " + model_metric);
  else bad("--tournament-metric " + o.metric + ": pass loss or " + model_metric);
  if (o.exchange == "weights+optimizer") p.exchange_optimizer = true;
  else if (o.exchange == "weights") p.exchange_optimizer = false;
  else bad("--ltfb-exchange " + o.exchange + ": pass weights or weights+optimizer");
  if (o.strategy == "pairwise") {
    p.strategy = TournamentStrategy::Pairwise;
  } else if (o.strategy.rfind("truncation", 0) == 0) {
    p.strategy = TournamentStrategy::Truncation;
    const std::string k = o.strategy.substr(10);
    if (!k.empty()) {
      std::size_t used = 0;
      long v = 0;
      try {
        v = k[0] == ':' ? std::stol(k.substr(1), &used) : 0;
      } catch (const std::exception&) {
        used = 0;
      }
      if (k[0] != ':' || used + 1 != k.size() || v < 1)
        bad("--ltfb-strategy " + o.strategy + ": pass truncation or truncation:K with K >= 1");
      p.truncate = static_cast<int>(std::min<long>(v, 1 << 20));
    }
    if (o.trainers > 1 && p.truncate > o.trainers / 2)
      bad("--ltfb-strategy " + o.strategy + ": K must be at most half of the " + std::to_string(o.trainers) +
          " trainers (the worst K take the best K's models)");
  } else {
    bad("--ltfb-strategy " + o.strategy + ": pass pairwise or truncation[:K]");
  }
  if (!o.mutate.empty()) p.lr_factors = parse_factors(o.mutate);
  return p;
}

std::vector<int> pairwise_partners(int trainers, std::uint64_t seed, std::uint64_t round) {
  std::vector<int> order(static_cast<std::size_t>(trainers));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(mix_seed({seed, round, kPairingStream}));
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  std::vector<int> partner(order.size());
  std::iota(partner.begin(), partner.end(), 0);  // the odd one out plays itself
  for (std::size_t i = 0; i + 1 < order.size(); i += 2) {
    partner[static_cast<std::size_t>(order[i])] = order[i + 1];
    partner[static_cast<std::size_t>(order[i + 1])] = order[i];
  }
  return partner;
}

std::vector<int> truncation_sources(const std::vector<double>& scores, TournamentMetric metric, int k) {
  std::vector<int> ranked(scores.size());
  std::iota(ranked.begin(), ranked.end(), 0);
  std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) {
    return score_beats(scores[static_cast<std::size_t>(a)], scores[static_cast<std::size_t>(b)], metric);
  });
  std::vector<int> source(scores.size());
  std::iota(source.begin(), source.end(), 0);
  const std::size_t n = ranked.size();
  for (std::size_t i = 0; i < static_cast<std::size_t>(k) && i < n / 2; ++i)
    source[static_cast<std::size_t>(ranked[n - 1 - i])] = ranked[i];
  return source;
}

TrainerSamples trainer_samples(std::size_t dataset_size, int trainers, int trainer, double fraction, std::size_t unit,
                               std::uint64_t seed) {
  const auto order = data::epoch_permutation(dataset_size, seed, kSplitEpoch);
  // Equal shares (the remainder of N / K is left out): trainers must run the same number of steps.
  const std::size_t n = dataset_size / static_cast<std::size_t>(trainers);
  const std::size_t begin = n * static_cast<std::size_t>(trainer), end = begin + n;
  std::size_t units =
      static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(n) / static_cast<double>(unit)));
  if (units == 0) units = 1;
  const std::size_t m = units * unit;
  if (m + unit > n)
    bad("trainer " + std::to_string(trainer) + " has " + std::to_string(n) + " of the " + std::to_string(dataset_size) +
        " training samples, too few for a tournament set of " + std::to_string(m) + " and one step of " +
        std::to_string(unit) + ": use more samples, fewer --trainers, a smaller --batch or --tournament-fraction");
  TrainerSamples s;
  s.tournament.assign(order.begin() + static_cast<std::ptrdiff_t>(begin),
                      order.begin() + static_cast<std::ptrdiff_t>(begin + m));
  s.train.assign(order.begin() + static_cast<std::ptrdiff_t>(begin + m),
                 order.begin() + static_cast<std::ptrdiff_t>(end));
  return s;
}

double mutation_factor(const std::vector<double>& factors, std::uint64_t seed, std::uint64_t round, int trainer) {
  if (factors.empty()) return 1.0;
  Rng rng(mix_seed({seed, round, static_cast<std::uint64_t>(trainer), kMutationStream}));
  return factors[rng.below(factors.size())];
}

}  // namespace fanstore::trainer
