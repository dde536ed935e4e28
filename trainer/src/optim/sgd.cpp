// SGD with momentum, dampening 0, L2 weight decay and optional Nesterov, as torch.optim.SGD.
#include "trainer/backend.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const ParameterTable& table, const OptimizerOptions& options) : Optimizer(table, options) {
    add_state("momentum");
  }
  std::string name() const override { return "sgd"; }

 protected:
  void update(ParameterTable& table, float lr, std::uint64_t) override {
    Tensor w = arena_part_of(table, Arena::Values), momentum = state(0);
    backend().sgd_update(w, arena_part_of(table, Arena::Gradients), momentum,
                         SgdUpdate{lr, options().momentum, options().weight_decay, options().nesterov});
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const ParameterTable& table, const OptimizerOptions& options) {
  return std::make_unique<Sgd>(table, options);
}

}  // namespace fanstore::trainer
