// Learning-rate schedules: warm-up ramp then constant, cosine or polynomial decay.
#include "trainer/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace fanstore::trainer {

DecayKind parse_decay_kind(const std::string& name) {
  if (name == "constant") return DecayKind::Constant;
  if (name == "cosine") return DecayKind::Cosine;
  if (name == "poly") return DecayKind::Poly;
  throw std::invalid_argument("unknown schedule '" + name + "' (expected constant, cosine or poly)");
}

double learning_rate_at(const ScheduleOptions& o, std::int64_t step) {
  if (o.warmup_steps > 0 && step < o.warmup_steps)
    return o.base_lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  if (o.decay == DecayKind::Constant) return o.base_lr;
  const std::int64_t span = std::max<std::int64_t>(1, o.total_steps - o.warmup_steps);
  const double t = std::clamp(static_cast<double>(step - o.warmup_steps) / static_cast<double>(span), 0.0, 1.0);
  if (o.decay == DecayKind::Cosine)
    return o.end_lr + (o.base_lr - o.end_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
  return o.end_lr + (o.base_lr - o.end_lr) * std::pow(1.0 - t, o.poly_power);
}

}  // namespace fanstore::trainer
