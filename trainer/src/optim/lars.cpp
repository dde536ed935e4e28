// LARS: SGD with momentum whose step per tensor is scaled by the trust ratio eta*|w|/(|g|+wd*|w|).
#include "trainer/backend.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

class Lars final : public Optimizer {
 public:
  Lars(const ParameterTable& table, const OptimizerOptions& options)
      : Optimizer(table, options), momentum_(add_state("momentum")) {
    for (const auto& e : table.parameters())
      segments_.push_back({e.offset, static_cast<std::size_t>(e.shape.numel()), excluded_from_lars(e)});
  }
  std::string name() const override { return "lars"; }

 protected:
  void update(ParameterTable& table, float lr, std::uint64_t) override {
    Tensor w = table.arena(Arena::Values);
    backend().lars_update(w, table.arena(Arena::Gradients), momentum_, segments_,
                          LarsUpdate{lr, options().momentum, options().weight_decay, options().lars_eta});
  }

 private:
  Tensor momentum_;
  std::vector<ParameterSegment> segments_;  // one per parameter tensor
};

}  // namespace

std::unique_ptr<Optimizer> make_lars(const ParameterTable& table, const OptimizerOptions& options) {
  return std::make_unique<Lars>(table, options);
}

}  // namespace fanstore::trainer
