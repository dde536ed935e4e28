// LARS: SGD with momentum whose step per tensor is scaled by the trust ratio eta*|w|/(|g|+wd*|w|).
#include <cmath>
#include <cstdint>

#include "trainer/optim.hpp"

namespace fanstore::trainer {
namespace {

// Sequential double sum: the norm must not depend on the thread count (bitwise resume).
double squared_norm(const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

class Lars final : public Optimizer {
 public:
  Lars(const ParameterTable& table, const OptimizerOptions& options)
      : Optimizer(options), momentum_(add_state("momentum", table.parameter_count())) {}
  std::string name() const override { return "lars"; }

 protected:
  void update(ParameterTable& table, float lr, std::uint64_t) override {
    const float m = options().momentum;
    for (const auto& entry : table.parameters()) {
      const auto n = static_cast<std::int64_t>(entry.shape.numel());
      float* w = table.values() + entry.offset;
      const float* g = table.gradients() + entry.offset;
      float* buf = momentum_.data() + entry.offset;
      float wd = 0.f, trust = 1.f;
      if (!excluded_from_lars(entry)) {
        wd = options().weight_decay;
        const double wn = std::sqrt(squared_norm(w, static_cast<std::size_t>(n)));
        const double gn = std::sqrt(squared_norm(g, static_cast<std::size_t>(n)));
        if (wn > 0 && gn > 0) trust = static_cast<float>(options().lars_eta * wn / (gn + wd * wn));
      }
#pragma omp parallel for schedule(static) if (n > 65536)
      for (std::int64_t i = 0; i < n; ++i) {
        const float d = trust * (g[i] + wd * w[i]);
        buf[i] = m * buf[i] + d;
        w[i] -= lr * buf[i];
      }
    }
  }

 private:
  std::vector<float>& momentum_;
};

}  // namespace

std::unique_ptr<Optimizer> make_lars(const ParameterTable& table, const OptimizerOptions& options) {
  return std::make_unique<Lars>(table, options);
}

}  // namespace fanstore::trainer
