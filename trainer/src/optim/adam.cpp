// Adam with bias correction and L2 weight decay, as torch.optim.Adam (amsgrad off).
#include <cmath>
#include <cstdint>

#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

class Adam final : public Optimizer {
 public:
  Adam(const ParameterTable& table, const OptimizerOptions& options)
      : Optimizer(options),
        first_(add_state("adam_m", table.parameter_count())),
        second_(add_state("adam_v", table.parameter_count())) {}
  std::string name() const override { return "adam"; }

 protected:
  void update(ParameterTable& table, float lr, std::uint64_t t) override {
    const auto n = static_cast<std::int64_t>(table.parameter_count());
    float* w = table.values();
    const float* g = table.gradients();
    float* m = first_.data();
    float* v = second_.data();
    const float b1 = options().beta1, b2 = options().beta2, eps = options().epsilon, wd = options().weight_decay;
    // PyTorch's arrangement of the bias corrections (step size and denominator), in double for the powers.
    const double correction1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(t));
    const double correction2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(t));
    const auto step_size = static_cast<float>(lr / correction1);
    const auto sqrt_correction2 = static_cast<float>(std::sqrt(correction2));
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const float d = g[i] + wd * w[i];
      m[i] = b1 * m[i] + (1.f - b1) * d;
      v[i] = b2 * v[i] + (1.f - b2) * d * d;
      w[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_correction2 + eps);
    }
  }

 private:
  std::vector<float>& first_;
  std::vector<float>& second_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const ParameterTable& table, const OptimizerOptions& options) {
  return std::make_unique<Adam>(table, options);
}

}  // namespace fanstore::trainer
