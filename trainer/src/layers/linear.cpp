// Fully connected layer: parameters, PyTorch initialisation, forward/backward on the inner-product kernel.
#include "trainer/layers/linear.hpp"

#include <cmath>
#include <stdexcept>

namespace fanstore::trainer {

Linear::Linear(std::string name, std::int64_t in_features, std::int64_t out_features, bool bias)
    : Layer(std::move(name)), in_(in_features), out_(out_features), bias_(bias) {}

void Linear::declare_parameters() {
  weight_ = declare_parameter("weight", Shape{out_, in_});
  if (bias_) bias_h_ = declare_parameter("bias", Shape{out_});
  kernel_ = backend().make_inner_product(bias_);
}

Shape Linear::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  expect_rank(*this, inputs[0], 2, 2);
  if (inputs[0][1] != in_)
    throw std::invalid_argument(name() + ": input " + inputs[0].to_string() + " does not have " + std::to_string(in_) +
                                " features");
  return Shape{inputs[0][0], out_};
}

void Linear::initialize(Rng& rng) {
  const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in_)));  // PyTorch's default
  Tensor w = table().value(weight_);
  for (std::int64_t i = 0; i < w.numel(); ++i) w[i] = rng.uniform_float(-bound, bound);
  if (bias_) {
    Tensor b = table().value(bias_h_);
    for (std::int64_t i = 0; i < b.numel(); ++i) b[i] = rng.uniform_float(-bound, bound);
  }
}

Tensor Linear::forward(const std::vector<Tensor>& inputs, Mode mode) {
  x_ = mode == Mode::Train ? inputs.at(0) : Tensor();  // inference keeps nothing
  Tensor b = bias_ ? table().value(bias_h_) : Tensor();
  return kernel_->forward(inputs.at(0), table().value(weight_), bias_ ? &b : nullptr, mode);
}

std::vector<Tensor> Linear::backward(Tensor dy) {
  if (!x_.defined()) throw std::logic_error(name() + ": backward needs a forward in Mode::Train first");
  const Tensor x = std::move(x_);  // kept for this backward only: it goes when backward returns
  Tensor dx = kernel_->backward_data(dy, table().value(weight_));
  table().drop_values(parameter_handles());  // sharded weights: gone before the whole gradient comes
  Tensor dw = table().gradient(weight_);
  Tensor db = bias_ ? table().gradient(bias_h_) : Tensor();
  kernel_->backward_weights(x, dy, dw, bias_ ? &db : nullptr);
  return {dx};
}

}  // namespace fanstore::trainer
