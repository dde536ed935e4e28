// Adam with bias correction and L2 weight decay, as torch.optim.Adam (amsgrad off).
#include "trainer/backend.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

class Adam final : public Optimizer {
 public:
  Adam(const ParameterTable& table, const OptimizerOptions& options)
      : Optimizer(table, options), first_(add_state("adam_m")), second_(add_state("adam_v")) {}
  std::string name() const override { return "adam"; }

 protected:
  void update(ParameterTable& table, float lr, std::uint64_t t) override {
    Tensor w = table.arena(Arena::Values);
    const auto& o = options();
    backend().adam_update(w, table.arena(Arena::Gradients), first_, second_,
                          AdamUpdate{lr, o.beta1, o.beta2, o.epsilon, o.weight_decay, t});
  }

 private:
  Tensor first_, second_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const ParameterTable& table, const OptimizerOptions& options) {
  return std::make_unique<Adam>(table, options);
}

}  // namespace fanstore::trainer
