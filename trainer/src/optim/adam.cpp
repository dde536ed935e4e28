// Adam with bias correction and L2 weight decay, as torch.optim.Adam (amsgrad off).
#include "trainer/backend.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

class Adam final : public Optimizer {
 public:
  Adam(const ParameterTable& table, const OptimizerOptions& options) : Optimizer(table, options) {
    add_state("adam_m");
    add_state("adam_v");
  }
  std::string name() const override { return "adam"; }

 protected:
  void update(ParameterTable& table, float lr, std::uint64_t t) override {
    Tensor w = arena_part_of(table, Arena::Values), first = state(0), second = state(1);
    const auto& o = options();
    backend().adam_update(w, arena_part_of(table, Arena::Gradients), first, second,
                          AdamUpdate{lr, o.beta1, o.beta2, o.epsilon, o.weight_decay, t});
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const ParameterTable& table, const OptimizerOptions& options) {
  return std::make_unique<Adam>(table, options);
}

}  // namespace fanstore::trainer
