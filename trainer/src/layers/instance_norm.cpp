// Affine instance normalisation, hand-rolled on plain layout with double-precision statistics.
#include <cmath>
#include <stdexcept>

#include "trainer/layers/normalization.hpp"

namespace fanstore::trainer {

InstanceNorm::InstanceNorm(std::string name, std::int64_t channels, float epsilon)
    : Layer(std::move(name)), channels_(channels), epsilon_(epsilon) {}

std::string InstanceNorm::kind() const { return "InstanceNorm"; }

void InstanceNorm::declare_parameters() {
  gamma_ = declare_parameter("weight", Shape{channels_});
  beta_ = declare_parameter("bias", Shape{channels_});
}

Shape InstanceNorm::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  expect_rank(*this, inputs[0], 3, 5);
  if (inputs[0][1] != channels_)
    throw std::invalid_argument(name() + ": input " + inputs[0].to_string() + " does not have " +
                                std::to_string(channels_) + " channels");
  // PyTorch refuses this too: the variance of a single value is 0 and the output is just beta.
  if (inputs[0].spatial_size() < 2)
    throw std::invalid_argument(name() + ": instance norm needs more than one spatial element, got " +
                                inputs[0].to_string() + " (use a larger input)");
  return inputs[0];
}

void InstanceNorm::initialize(Rng& rng) {
  (void)rng;
  Tensor g = table().value(gamma_), b = table().value(beta_);
  for (std::int64_t c = 0; c < channels_; ++c) {
    g[c] = 1.f;
    b[c] = 0.f;
  }
}

Tensor InstanceNorm::forward(const std::vector<Tensor>& inputs, Mode mode) {
  (void)mode;  // no running statistics: Train and Eval normalise the same way
  Tensor x = backend().to_plain(inputs.at(0));
  const Shape& s = x.shape();
  const std::int64_t planes = s[0] * s[1], size = s.spatial_size();
  const Tensor g = table().value(gamma_), b = table().value(beta_);
  x_hat_ = Tensor::zeros(s);
  inv_std_.assign(static_cast<std::size_t>(planes), 0.f);
  Tensor y = Tensor::zeros(s);
  for (std::int64_t p = 0; p < planes; ++p) {
    const float* in = x.data() + p * size;
    double sum = 0, sq = 0;
    for (std::int64_t i = 0; i < size; ++i) sum += in[i];
    const double mean = sum / static_cast<double>(size);
    for (std::int64_t i = 0; i < size; ++i) sq += (in[i] - mean) * (in[i] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(size) + epsilon_);  // biased variance
    inv_std_[static_cast<std::size_t>(p)] = static_cast<float>(inv);
    const std::int64_t c = p % s[1];
    float* xh = x_hat_.data() + p * size;
    float* out = y.data() + p * size;
    for (std::int64_t i = 0; i < size; ++i) {
      xh[i] = static_cast<float>((in[i] - mean) * inv);
      out[i] = g[c] * xh[i] + b[c];
    }
  }
  return y;
}

std::vector<Tensor> InstanceNorm::backward(const Tensor& dy_any) {
  Tensor dy = backend().to_plain(dy_any);
  const Shape& s = dy.shape();
  const std::int64_t planes = s[0] * s[1], size = s.spatial_size();
  const Tensor g = table().value(gamma_);
  Tensor dg = table().gradient(gamma_), db = table().gradient(beta_);
  std::vector<double> dgamma(static_cast<std::size_t>(s[1]), 0.0), dbeta(static_cast<std::size_t>(s[1]), 0.0);
  Tensor dx = Tensor::zeros(s);
  for (std::int64_t p = 0; p < planes; ++p) {
    const std::int64_t c = p % s[1];
    const float* d = dy.data() + p * size;
    const float* xh = x_hat_.data() + p * size;
    double sum_d = 0, sum_dxh = 0;
    for (std::int64_t i = 0; i < size; ++i) {
      sum_d += d[i];
      sum_dxh += static_cast<double>(d[i]) * xh[i];
    }
    dgamma[static_cast<std::size_t>(c)] += sum_dxh;
    dbeta[static_cast<std::size_t>(c)] += sum_d;
    // dx = gamma * inv_std * (dy - mean(dy) - x_hat * mean(dy * x_hat))
    const double k = g[c] * inv_std_[static_cast<std::size_t>(p)], n = static_cast<double>(size);
    float* out = dx.data() + p * size;
    for (std::int64_t i = 0; i < size; ++i) out[i] = static_cast<float>(k * (d[i] - sum_d / n - xh[i] * sum_dxh / n));
  }
  for (std::int64_t c = 0; c < s[1]; ++c) {
    dg[c] = static_cast<float>(dgamma[static_cast<std::size_t>(c)]);
    db[c] = static_cast<float>(dbeta[static_cast<std::size_t>(c)]);
  }
  return {dx};
}

}  // namespace fanstore::trainer
