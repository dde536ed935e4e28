// SGD with momentum, dampening 0, L2 weight decay and optional Nesterov, as torch.optim.SGD.
#include "trainer/backend.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const ParameterTable& table, const OptimizerOptions& options)
      : Optimizer(table, options), momentum_(add_state("momentum")) {}
  std::string name() const override { return "sgd"; }

 protected:
  void update(ParameterTable& table, float lr, std::uint64_t) override {
    Tensor w = table.arena(Arena::Values);
    backend().sgd_update(w, table.arena(Arena::Gradients), momentum_,
                         SgdUpdate{lr, options().momentum, options().weight_decay, options().nesterov});
  }

 private:
  Tensor momentum_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const ParameterTable& table, const OptimizerOptions& options) {
  return std::make_unique<Sgd>(table, options);
}

}  // namespace fanstore::trainer
