// SGD with momentum, dampening 0, L2 weight decay and optional Nesterov, as torch.optim.SGD.
#include <cstdint>

#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const ParameterTable& table, const OptimizerOptions& options)
      : Optimizer(options), momentum_(add_state("momentum", table.parameter_count())) {}
  std::string name() const override { return "sgd"; }

 protected:
  void update(ParameterTable& table, float lr, std::uint64_t) override {
    const auto n = static_cast<std::int64_t>(table.parameter_count());
    float* w = table.values();
    const float* g = table.gradients();
    float* buf = momentum_.data();
    const float m = options().momentum, wd = options().weight_decay;
    const bool nesterov = options().nesterov;
    // Element-wise only, so any thread split gives the same bits.
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      float d = g[i] + wd * w[i];
      if (m != 0.f) {
        buf[i] = m * buf[i] + d;  // PyTorch's first step sets buf = d, the same as m*0 + d
        d = nesterov ? d + m * buf[i] : buf[i];
      }
      w[i] -= lr * d;
    }
  }

 private:
  std::vector<float>& momentum_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const ParameterTable& table, const OptimizerOptions& options) {
  return std::make_unique<Sgd>(table, options);
}

}  // namespace fanstore::trainer
