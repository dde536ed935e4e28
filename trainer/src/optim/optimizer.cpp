// Optimizer base: step counting, state arrays, and the factory by name.
#include "trainer/optim.hpp"

#include <stdexcept>

namespace fanstore::trainer {

bool excluded_from_lars(const ParameterEntry& entry) { return entry.shape.rank() == 1; }

void Optimizer::step(ParameterTable& table, float learning_rate) {
  ++steps_;
  update(table, learning_rate, steps_);
}

std::vector<float>& Optimizer::add_state(const std::string& name, std::size_t floats) {
  state_.emplace_back(name, std::vector<float>(floats, 0.f));
  return state_.back().second;
}

std::vector<std::pair<std::string, std::vector<float>*>> Optimizer::state() {
  std::vector<std::pair<std::string, std::vector<float>*>> out;
  for (auto& [name, values] : state_) out.emplace_back(name, &values);
  return out;
}

std::unique_ptr<Optimizer> make_optimizer(const ParameterTable& table, const OptimizerOptions& options) {
  if (options.kind == "sgd") return make_sgd(table, options);
  if (options.kind == "lars") return make_lars(table, options);
  if (options.kind == "adam") return make_adam(table, options);
  throw std::invalid_argument("unknown optimizer '" + options.kind + "' (expected sgd, lars or adam)");
}

}  // namespace fanstore::trainer
