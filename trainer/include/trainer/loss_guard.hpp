// The loss-spike / NaN guard: keeps the last good state and rolls back to it on a bad loss.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/model.hpp"
#include "trainer/optim.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer {

// A corrupted weight or gradient (silent data corruption, a bad update) shows up in the next
// step's loss. Before each update the trainer asks accept(loss): a good loss (with finite weights)
// snapshots the state it came from; a NaN/Inf loss or weight, or a loss above spike_factor x the
// running average (after a warm-up of 20 good steps), restores that snapshot and skips the step.
class LossGuard {
 public:
  explicit LossGuard(double spike_factor) : spike_factor_(spike_factor) {}

  // True: the loss is fine and the current state was saved as the last good one.
  bool accept(double loss, Model& model, Optimizer& optimizer);
  // Makes the current state the last good one (after a tournament replaced the model).
  void rebase(Model& model, Optimizer& optimizer);
  // Puts the last good state back (parameters, buffers, optimizer state and step count). Every rank of
  // a sharded optimizer's group calls it (the ranks take the same decisions).
  void roll_back(Model& model, Optimizer& optimizer);
  std::uint64_t rollbacks() const { return rollbacks_; }
  // Rejections since the last good loss of a state that an update made (not one a rollback restored).
  std::uint64_t consecutive_rejections() const { return consecutive_; }
  // Why the last accept() said no: "NaN/Inf loss", "NaN/Inf weight" or "loss spike".
  const char* last_reason() const { return reason_; }

 private:
  double spike_factor_;
  double average_ = 0;
  std::uint64_t good_steps_ = 0, rollbacks_ = 0, consecutive_ = 0;
  bool have_snapshot_ = false, restored_ = false;
  const char* reason_ = "";
  // The last good state, on the model's device (copied there and back by backend ops). With sharded
  // optimizer state only the optimizer's part of the values: roll_back is then collective over its group.
  Tensor values_, buffers_;
  std::vector<Tensor> state_;
  std::uint64_t optimizer_steps_ = 0;
};

}  // namespace fanstore::trainer
