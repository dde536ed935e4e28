// Loss guard: running average of good losses, state snapshot and rollback.
#include "trainer/loss_guard.hpp"

#include <algorithm>
#include <cmath>

namespace fanstore::trainer {

namespace {

// NaN/Inf in any weight: a sum in double propagates them and cannot overflow for real weights.
// Needed besides the loss check because a poisoned weight can hide from the loss for a few steps
// (max pooling drops NaN), and a snapshot must never capture it.
bool all_finite(const float* values, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += values[i];
  return std::isfinite(sum);
}

}  // namespace

bool LossGuard::accept(double loss, Model& model, Optimizer& optimizer) {
  const bool spike = spike_factor_ > 0 && good_steps_ >= 20 && loss > spike_factor_ * average_;
  const ParameterTable& table = model.parameters();
  reason_ = !std::isfinite(loss) ? "NaN/Inf loss"
            : !all_finite(table.values(), table.parameter_count()) ? "NaN/Inf weight"
            : spike ? "loss spike" : "";
  if (*reason_ != '\0') {
    ++consecutive_;
    return false;
  }
  consecutive_ = 0;
  average_ = good_steps_ == 0 ? loss : 0.9 * average_ + 0.1 * loss;
  ++good_steps_;
  ParameterTable& t = model.parameters();
  values_.assign(t.values(), t.values() + t.parameter_count());
  buffers_.assign(t.buffer_values(), t.buffer_values() + t.buffer_count());
  auto state = optimizer.state();
  state_.resize(state.size());
  for (std::size_t i = 0; i < state.size(); ++i) state_[i] = *state[i].second;
  optimizer_steps_ = optimizer.steps_taken();
  have_snapshot_ = true;
  return true;
}

void LossGuard::roll_back(Model& model, Optimizer& optimizer) {
  ++rollbacks_;
  if (!have_snapshot_) return;  // the very first loss was bad: nothing better to go back to
  ParameterTable& t = model.parameters();
  std::copy(values_.begin(), values_.end(), t.values());
  std::copy(buffers_.begin(), buffers_.end(), t.buffer_values());
  auto state = optimizer.state();
  for (std::size_t i = 0; i < state.size(); ++i) *state[i].second = state_[i];
  optimizer.set_steps_taken(optimizer_steps_);
}

}  // namespace fanstore::trainer
