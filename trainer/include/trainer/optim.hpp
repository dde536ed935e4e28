// Optimizers over the flat parameter arena: SGD with momentum (PyTorch semantics), LARS, Adam.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/parameters.hpp"

namespace fanstore::trainer {

struct OptimizerOptions {
  std::string kind = "sgd";  // "sgd", "lars" or "adam"
  float momentum = 0.9f;     // SGD/LARS momentum; Adam ignores it (uses beta1)
  float weight_decay = 0.f;  // L2 penalty added to the gradient, as torch.optim's weight_decay
  bool nesterov = false;     // SGD only
  float lars_eta = 0.001f;   // LARS trust coefficient
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // Adam
};

class Communicator;  // trainer/distributed.hpp

// Part `index` of `parts` of the parameter arena: near-equal element counts, cut only between parameter
// tensors when `whole_tensors` (an update that needs a tensor's norm on one rank).
ArenaPart arena_part(const ParameterTable& table, int parts, int index, bool whole_tensors);

// LARS (and its weight decay) skips per-channel vectors: BN/IN scale and shift and every bias.
// They are exactly the rank-1 parameters, so the rule needs no per-layer knowledge.
bool excluded_from_lars(const ParameterEntry& entry);

// One update per step over every parameter tensor, as one backend op over the whole arena; the
// gradients in the table are final (already averaged over ranks). State (momentum buffers, Adam
// moments) is a set of arenas laid out like the parameter arena, on the table's device, so a
// checkpoint saves it with one loop. Create the optimizer after the table is committed.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  void step(ParameterTable& table, float learning_rate);
  std::uint64_t steps_taken() const { return steps_; }
  void set_steps_taken(std::uint64_t steps) { steps_ = steps; }

  // ZeRO stage 1 over `group` (the spatial group of a grid, whose ranks hold the same parameters): rank
  // i keeps the state of part i of the parameter arena and updates only that part; step() then gathers
  // the parts, so every rank's values are whole again. Call before the first step, while the state is
  // still zero; `group` outlives the optimizer.
  void shard_over(Communicator& group);
  bool sharded() const { return group_ != nullptr; }
  // What this rank updates and keeps state for (the whole arena unless sharded).
  ArenaPart part() const { return parts_[rank_]; }
  // Every rank's part, in group rank order (one part, the whole arena, unless sharded).
  const std::vector<ArenaPart>& parts() const { return parts_; }
  // After part() of the values was written (a step, a rollback): every rank's part to every rank of the
  // group. Collective over the group when sharded; nothing otherwise.
  void share_part(ParameterTable& table);
  // Named state arenas, each part().size() F32 elements on the table's device (shallow handles:
  // writing into them writes the state).
  std::vector<std::pair<std::string, Tensor>> state() const;
  // The state arenas whole, parameter_count() floats each on the host (checkpoints): collective over
  // the group when sharded, so every rank of it calls this.
  std::vector<std::pair<std::string, std::vector<float>>> whole_state() const;
  // An update that needs each tensor's norm on one rank (LARS) shards only between tensors.
  virtual bool needs_whole_tensors() const { return false; }

 protected:
  Optimizer(const ParameterTable& table, const OptimizerOptions& options);
  // `t` is the 1-based step number (Adam's bias correction needs it). Updates part() of the arena.
  virtual void update(ParameterTable& table, float learning_rate, std::uint64_t t) = 0;
  // Declares a state arena (in the constructor); state(i) is arena i, part().size() elements.
  void add_state(const std::string& name);
  Tensor state(std::size_t i) const { return state_.at(i).second; }
  // part() of the values or gradients arena.
  Tensor arena_part_of(const ParameterTable& table, Arena which) const;
  const OptimizerOptions& options() const { return options_; }
  Backend& backend() const { return backend_; }

 private:
  std::vector<std::size_t> part_sizes() const;
  Backend& backend_;
  std::size_t count_;
  OptimizerOptions options_;
  std::uint64_t steps_ = 0;
  std::vector<std::pair<std::string, Tensor>> state_;
  std::vector<ArenaPart> parts_;
  std::size_t rank_ = 0;  // in the group: parts_[rank_] is part()
  Communicator* group_ = nullptr;
  const ParameterTable* table_;
};

// torch.optim.SGD(momentum, dampening=0, weight_decay, nesterov): g += wd*w; buf = m*buf + g;
// w -= lr * (nesterov ? g + m*buf : buf). Weight decay applies to every parameter, as in PyTorch.
std::unique_ptr<Optimizer> make_sgd(const ParameterTable& table, const OptimizerOptions& options);

// LARS (You et al.; torchlars / MLPerf form) per parameter tensor, except excluded_from_lars ones:
// trust = eta*|w| / (|g| + wd*|w|) (1 when |w| or |g| is 0); d = trust * (g + wd*w);
// buf = m*buf + d; w -= lr*buf. Excluded tensors: buf = m*buf + g; w -= lr*buf (no decay).
std::unique_ptr<Optimizer> make_lars(const ParameterTable& table, const OptimizerOptions& options);

// torch.optim.Adam (L2 weight decay added to the gradient, bias-corrected moments):
// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
std::unique_ptr<Optimizer> make_adam(const ParameterTable& table, const OptimizerOptions& options);

// By options.kind; throws std::invalid_argument for an unknown kind.
std::unique_ptr<Optimizer> make_optimizer(const ParameterTable& table, const OptimizerOptions& options);

}  // namespace fanstore::trainer
