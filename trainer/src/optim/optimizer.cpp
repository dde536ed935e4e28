// Optimizer base: step counting, state arenas on the table's device, sharding the state over a group
// (ZeRO stage 1), and the factory by name.
#include "trainer/optim.hpp"

#include <algorithm>
#include <stdexcept>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"

namespace fanstore::trainer {

bool excluded_from_lars(const ParameterEntry& entry) { return entry.shape.rank() == 1; }

ArenaPart arena_part(const ParameterTable& table, int parts, int index, bool whole_tensors) {
  const std::size_t count = table.parameter_count();
  // The ideal cut before part k, moved to the first tensor boundary at or after it when whole_tensors.
  auto cut = [&](int k) -> std::size_t {
    const std::size_t ideal = count * static_cast<std::size_t>(k) / static_cast<std::size_t>(parts);
    if (!whole_tensors || k == 0 || k == parts) return ideal;
    for (const auto& e : table.parameters())
      if (e.offset >= ideal) return e.offset;
    return count;
  };
  return {cut(index), cut(index + 1)};
}

Optimizer::Optimizer(const ParameterTable& table, const OptimizerOptions& options)
    : backend_(table.backend()),
      count_(table.parameter_count()),
      options_(options),
      parts_{{0, table.parameter_count()}},
      table_(&table) {
  if (!table.committed()) throw std::logic_error("optimizer created before ParameterTable::commit()");
}

void Optimizer::step(ParameterTable& table, float learning_rate) {
  ++steps_;
  update(table, learning_rate, steps_);
  share_part(table);
}

void Optimizer::shard_over(Communicator& group) {
  if (steps_ != 0) throw std::logic_error("Optimizer::shard_over after the first step");
  if (group.size() == 1) return;
  group_ = &group;
  parts_.clear();
  for (int r = 0; r < group.size(); ++r) parts_.push_back(arena_part(*table_, group.size(), r, needs_whole_tensors()));
  rank_ = static_cast<std::size_t>(group.rank());
  for (auto& [name, arena] : state_) arena = backend_.zeros(Shape{static_cast<std::int64_t>(part().size())});
}

void Optimizer::add_state(const std::string& name) {
  state_.emplace_back(name, backend_.zeros(Shape{static_cast<std::int64_t>(part().size())}));
}

Tensor Optimizer::arena_part_of(const ParameterTable& table, Arena which) const {
  if (which == Arena::Gradients) return table.gradients_of(part());
  if (which == Arena::Values) return table.values_of(part());
  const Tensor arena = table.arena(which);
  if (part().begin == 0 && part().end == count_) return arena;
  return arena.slice(part().begin, Shape{static_cast<std::int64_t>(part().size())});
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const { return state_; }

std::vector<std::size_t> Optimizer::part_sizes() const {
  std::vector<std::size_t> sizes;
  for (const ArenaPart& p : parts_) sizes.push_back(p.size());
  return sizes;
}

std::vector<std::pair<std::string, std::vector<float>>> Optimizer::whole_state() const {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& [name, arena] : state_) {
    // This rank's part in place in a host copy of the whole arena, then every other part gathered into it
    // (host memory: over MPI on GPUs too), so one whole copy exists at a time.
    // (Unsharded, part() is the whole arena.)
    const Tensor host = backend_.to_host(arena);
    std::vector<float> whole(count_);
    std::copy(host.data(), host.data() + host.numel(), whole.begin() + static_cast<std::ptrdiff_t>(part().begin));
    if (group_) group_->gather(whole.data(), part_sizes());
    out.emplace_back(name, std::move(whole));
  }
  return out;
}

void Optimizer::share_part(ParameterTable& table) {
  // Every rank's updated part, on every rank; a table that keeps its part only (ZeRO stage 3) gathers per layer.
  if (group_ && !table.values_sharded()) group_->gather(table.values(), part_sizes());
}

std::unique_ptr<Optimizer> make_optimizer(const ParameterTable& table, const OptimizerOptions& options) {
  if (options.kind == "sgd") return make_sgd(table, options);
  if (options.kind == "lars") return make_lars(table, options);
  if (options.kind == "adam") return make_adam(table, options);
  throw std::invalid_argument("unknown optimizer '" + options.kind + "' (expected sgd, lars or adam)");
}

}  // namespace fanstore::trainer
