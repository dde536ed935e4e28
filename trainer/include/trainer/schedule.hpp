// Learning-rate schedules: linear warm-up, then constant, cosine or polynomial decay, per step.
#pragma once

#include <cstdint>
#include <string>

namespace fanstore::trainer {

enum class DecayKind { Constant, Cosine, Poly };

// "constant", "cosine" or "poly"; throws std::invalid_argument otherwise.
DecayKind parse_decay_kind(const std::string& name);

struct ScheduleOptions {
  double base_lr = 0.1;
  std::int64_t warmup_steps = 0;  // linear ramp: step s < warmup gets base_lr * (s + 1) / warmup
  std::int64_t total_steps = 1;   // decay reaches end_lr at this step
  DecayKind decay = DecayKind::Constant;
  double end_lr = 0.0;
  double poly_power = 2.0;  // MLPerf ResNet's LARS schedule uses 2
};

// The rate for 0-based step `step`. After warm-up, with t = (step - warmup) / (total - warmup)
// clamped to [0, 1]: cosine end + (base - end) * (1 + cos(pi t)) / 2; poly end + (base - end) * (1 - t)^power.
double learning_rate_at(const ScheduleOptions& options, std::int64_t step);

}  // namespace fanstore::trainer
