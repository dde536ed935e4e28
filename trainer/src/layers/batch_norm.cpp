// Batch normalisation layer: the backend's kernel plus PyTorch's running-statistics update.
#include <stdexcept>

#include "trainer/layers/normalization.hpp"

namespace fanstore::trainer {

BatchNorm::BatchNorm(std::string name, std::int64_t channels, float epsilon, float momentum, float initial_scale)
    : Layer(std::move(name)),
      channels_(channels),
      epsilon_(epsilon),
      momentum_(momentum),
      initial_scale_(initial_scale) {}

std::string BatchNorm::kind() const { return "BatchNorm"; }

void BatchNorm::declare_parameters() {
  gamma_ = declare_parameter("weight", Shape{channels_});
  beta_ = declare_parameter("bias", Shape{channels_});
  running_mean_ = declare_buffer("running_mean", Shape{channels_});
  running_var_ = declare_buffer("running_var", Shape{channels_});
  batch_mean_ = backend().zeros(Shape{channels_});
  batch_var_ = backend().zeros(Shape{channels_});
  kernel_ = backend().make_batch_norm(epsilon_);
}

Shape BatchNorm::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  expect_rank(*this, inputs[0], 2, 5);
  if (inputs[0][1] != channels_)
    throw std::invalid_argument(name() + ": input " + inputs[0].to_string() + " does not have " +
                                std::to_string(channels_) + " channels");
  return inputs[0];
}

void BatchNorm::initialize(Rng& rng) {
  (void)rng;
  Tensor g = table().value(gamma_), b = table().value(beta_);
  Tensor m = table().buffer(running_mean_), v = table().buffer(running_var_);
  for (std::int64_t c = 0; c < channels_; ++c) {
    g[c] = initial_scale_;
    b[c] = 0.f;
    m[c] = 0.f;
    v[c] = 1.f;
  }
}

Tensor BatchNorm::forward(const std::vector<Tensor>& inputs, Mode mode) {
  const Tensor& x = inputs.at(0);
  Tensor g = table().value(gamma_), b = table().value(beta_);
  if (mode == Mode::Eval) {
    Tensor m = table().buffer(running_mean_), v = table().buffer(running_var_);
    return kernel_->forward(x, g, b, m, v, mode);
  }
  Tensor y = kernel_->forward(x, g, b, batch_mean_, batch_var_, mode);
  // running = (1 - momentum) * running + momentum * batch; PyTorch updates the running variance
  // with the unbiased batch variance.
  const double count = static_cast<double>(x.numel() / channels_);
  const double unbias = count > 1 ? count / (count - 1) : 1.0;
  Tensor m = table().buffer(running_mean_), v = table().buffer(running_var_);
  backend().axpby(momentum_, batch_mean_, 1.f - momentum_, m);
  backend().axpby(static_cast<float>(momentum_ * unbias), batch_var_, 1.f - momentum_, v);
  return y;
}

std::vector<Tensor> BatchNorm::backward(Tensor dy) {
  Tensor dg = table().gradient(gamma_), db = table().gradient(beta_);
  return {kernel_->backward(dy, table().value(gamma_), dg, db)};
}

}  // namespace fanstore::trainer
