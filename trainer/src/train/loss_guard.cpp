// Loss guard: running average of good losses, state snapshot and rollback, on the model's device.
#include "trainer/loss_guard.hpp"

#include <cmath>

#include "trainer/backend.hpp"

namespace fanstore::trainer {
namespace {

// Copies src into dst, allocating dst like src the first time.
void snapshot(Backend& backend, const Tensor& src, Tensor& dst) {
  if (!dst.defined()) dst = backend.zeros_like(src);
  backend.copy(src, dst);
}

// The part of the values this rank's optimizer updates (all of them unless its state is sharded): the
// other parts are snapshotted by their owners and shared again after a rollback.
Tensor own_values(ParameterTable& table, const Optimizer& optimizer) { return table.values_of(optimizer.part()); }

}  // namespace

bool LossGuard::accept(double loss, Model& model, Optimizer& optimizer) {
  const bool spike = spike_factor_ > 0 && good_steps_ >= 20 && loss > spike_factor_ * average_;
  ParameterTable& table = model.parameters();
  // NaN/Inf in any weight is checked besides the loss because a poisoned weight can hide from the
  // loss for a few steps (max pooling drops NaN), and a snapshot must never capture it.
  reason_ = !std::isfinite(loss)         ? "NaN/Inf loss"
            : !table.all_values_finite() ? "NaN/Inf weight"
            : spike                      ? "loss spike"
                                         : "";
  if (*reason_ != '\0') {
    ++consecutive_;
    return false;
  }
  // The state a rollback restored was good before: its loss says nothing of the update that failed, and
  // counting it as a good step would let a diverging update alternate with rollbacks for ever.
  if (!restored_) consecutive_ = 0;
  restored_ = false;
  average_ = good_steps_ == 0 ? loss : 0.9 * average_ + 0.1 * loss;
  ++good_steps_;
  rebase(model, optimizer);
  return true;
}

void LossGuard::rebase(Model& model, Optimizer& optimizer) {
  ParameterTable& table = model.parameters();
  Backend& backend = table.backend();
  snapshot(backend, own_values(table, optimizer), values_);
  snapshot(backend, table.arena(Arena::Buffers), buffers_);
  auto state = optimizer.state();
  state_.resize(state.size());
  for (std::size_t i = 0; i < state.size(); ++i) snapshot(backend, state[i].second, state_[i]);
  optimizer_steps_ = optimizer.steps_taken();
  have_snapshot_ = true;
}

void LossGuard::roll_back(Model& model, Optimizer& optimizer) {
  ++rollbacks_;
  if (!have_snapshot_) return;  // the very first loss was bad: nothing better to go back to
  ParameterTable& table = model.parameters();
  Backend& backend = table.backend();
  Tensor values = own_values(table, optimizer), buffers = table.arena(Arena::Buffers);
  backend.copy(values_, values);
  optimizer.share_part(table);
  backend.copy(buffers_, buffers);
  auto state = optimizer.state();
  for (std::size_t i = 0; i < state.size(); ++i) backend.copy(state_[i], state[i].second);
  optimizer.set_steps_taken(optimizer_steps_);
  restored_ = true;
}

}  // namespace fanstore::trainer
