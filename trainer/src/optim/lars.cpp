// LARS: SGD with momentum whose step per tensor is scaled by the trust ratio eta*|w|/(|g|+wd*|w|).
#include "trainer/backend.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

class Lars final : public Optimizer {
 public:
  Lars(const ParameterTable& table, const OptimizerOptions& options) : Optimizer(table, options) {
    add_state("momentum");
  }
  std::string name() const override { return "lars"; }
  bool needs_whole_tensors() const override { return true; }

 protected:
  void update(ParameterTable& table, float lr, std::uint64_t) override {
    // One segment per parameter tensor in this rank's part (which cuts only between tensors).
    const ArenaPart p = part();
    std::vector<ParameterSegment> segments;
    for (const auto& e : table.parameters())
      if (e.offset >= p.begin && e.offset < p.end)
        segments.push_back({e.offset - p.begin, static_cast<std::size_t>(e.shape.numel()), excluded_from_lars(e)});
    Tensor w = arena_part_of(table, Arena::Values), momentum = state(0);
    backend().lars_update(w, arena_part_of(table, Arena::Gradients), momentum, segments,
                          LarsUpdate{lr, options().momentum, options().weight_decay, options().lars_eta});
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_lars(const ParameterTable& table, const OptimizerOptions& options) {
  return std::make_unique<Lars>(table, options);
}

}  // namespace fanstore::trainer
