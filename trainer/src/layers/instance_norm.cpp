// Affine instance normalisation on the backend's normalisation ops (per-plane statistics in double).
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
  // No running statistics: Train and Eval normalise the same way; only Train keeps x and its sums.
  Tensor x = backend().to_plain(inputs.at(0));
  Tensor sums = backend().norm_sums(x, NormGroups::PerSampleChannel);
  const auto count = static_cast<double>(x.shape().spatial_size());
  Tensor y = backend().norm_apply(x, sums, count, table().value(gamma_), table().value(beta_), epsilon_,
                                  NormGroups::PerSampleChannel);
  if (mode == Mode::Train) {
    x_ = std::move(x);
    sums_ = std::move(sums);
  } else {
    x_ = sums_ = Tensor();
  }
  return y;
}

std::vector<Tensor> InstanceNorm::backward(Tensor dy_any) {
  if (!x_.defined()) throw std::logic_error(name() + ": backward needs a forward in Mode::Train first");
  const Tensor x = std::move(x_), forward_sums = std::move(sums_);  // for this backward only
  Tensor dy = backend().to_plain(dy_any);
  const auto count = static_cast<double>(x.shape().spatial_size());
  Tensor sums = backend().norm_backward_sums(dy, x, forward_sums, count, epsilon_, NormGroups::PerSampleChannel);
  Tensor dg = table().gradient(gamma_), db = table().gradient(beta_);
  return {backend().norm_backward_apply(dy, x, forward_sums, sums, count, table().value(gamma_), epsilon_,
                                        NormGroups::PerSampleChannel, dg, db)};
}

}  // namespace fanstore::trainer
