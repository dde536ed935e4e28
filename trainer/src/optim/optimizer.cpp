// Optimizer base: step counting, state arenas on the table's device, and the factory by name.
#include "trainer/optim.hpp"

#include <stdexcept>

#include "trainer/backend.hpp"

namespace fanstore::trainer {

bool excluded_from_lars(const ParameterEntry& entry) { return entry.shape.rank() == 1; }

Optimizer::Optimizer(const ParameterTable& table, const OptimizerOptions& options)
    : backend_(table.backend()), count_(table.parameter_count()), options_(options) {
  if (!table.committed()) throw std::logic_error("optimizer created before ParameterTable::commit()");
}

void Optimizer::step(ParameterTable& table, float learning_rate) {
  ++steps_;
  update(table, learning_rate, steps_);
}

Tensor Optimizer::add_state(const std::string& name) {
  state_.emplace_back(name, backend_.zeros(Shape{static_cast<std::int64_t>(count_)}));
  return state_.back().second;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const { return state_; }

std::unique_ptr<Optimizer> make_optimizer(const ParameterTable& table, const OptimizerOptions& options) {
  if (options.kind == "sgd") return make_sgd(table, options);
  if (options.kind == "lars") return make_lars(table, options);
  if (options.kind == "adam") return make_adam(table, options);
  throw std::invalid_argument("unknown optimizer '" + options.kind + "' (expected sgd, lars or adam)");
}

}  // namespace fanstore::trainer
