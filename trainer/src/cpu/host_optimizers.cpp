// Host optimizer updates over the flat arenas (the formulas are documented in optim.hpp).
#include <cmath>

#include "host_ops.hpp"

namespace fanstore::trainer::cpu {
namespace {

// Sequential double sum: the norm must not depend on the thread count (bitwise resume).
double squared_norm(const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace

void sgd_update(Tensor& weights, const Tensor& gradients, Tensor& momentum, const SgdUpdate& u) {
  const auto n = weights.numel();
  float* w = weights.data();
  const float* g = gradients.data();
  float* buf = momentum.data();
  const float lr = u.lr, m = u.momentum, wd = u.weight_decay;
  const bool nesterov = u.nesterov;
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

void lars_update(Tensor& weights, const Tensor& gradients, Tensor& momentum,
                 const std::vector<ParameterSegment>& segments, const LarsUpdate& u) {
  for (const auto& seg : segments) {
    const auto n = static_cast<std::int64_t>(seg.count);
    float* w = weights.data() + seg.offset;
    const float* g = gradients.data() + seg.offset;
    float* buf = momentum.data() + seg.offset;
    float wd = 0.f, trust = 1.f;
    if (!seg.lars_excluded) {
      wd = u.weight_decay;
      const double wn = std::sqrt(squared_norm(w, seg.count));
      const double gn = std::sqrt(squared_norm(g, seg.count));
      if (wn > 0 && gn > 0) trust = static_cast<float>(u.eta * wn / (gn + wd * wn));
    }
    const float lr = u.lr, m = u.momentum;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) {
      const float d = trust * (g[i] + wd * w[i]);
      buf[i] = m * buf[i] + d;
      w[i] -= lr * buf[i];
    }
  }
}

void adam_update(Tensor& weights, const Tensor& gradients, Tensor& first, Tensor& second, const AdamUpdate& u) {
  const auto n = weights.numel();
  float* w = weights.data();
  const float* g = gradients.data();
  float* m = first.data();
  float* v = second.data();
  const float b1 = u.beta1, b2 = u.beta2, eps = u.epsilon, wd = u.weight_decay;
  // PyTorch's arrangement of the bias corrections (step size and denominator), in double for the powers.
  const double correction1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(u.step));
  const double correction2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(u.step));
  const auto step_size = static_cast<float>(u.lr / correction1);
  const auto sqrt_correction2 = static_cast<float>(std::sqrt(correction2));
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * w[i];
    m[i] = b1 * m[i] + (1.f - b1) * d;
    v[i] = b2 * v[i] + (1.f - b2) * d * d;
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_correction2 + eps);
  }
}

}  // namespace fanstore::trainer::cpu
