// Element-wise activation layer: forwards to the backend's eltwise kernel, keeping the input layout.
#include "trainer/layers/activation.hpp"

namespace fanstore::trainer {

Activation::Activation(std::string name, EltwiseSpec spec) : Layer(std::move(name)), spec_(spec) {}

std::string Activation::kind() const {
  switch (spec_.kind) {
    case EltwiseKind::ReLU: return "ReLU";
    case EltwiseKind::LeakyReLU: return "LeakyReLU";
    case EltwiseKind::Tanh: return "Tanh";
    case EltwiseKind::Scale: return "Scale";
  }
  return "Eltwise";
}

Shape Activation::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  return inputs[0];
}

Tensor Activation::forward(const std::vector<Tensor>& inputs, Mode mode) {
  (void)mode;
  if (!kernel_) kernel_ = backend().make_eltwise(spec_);
  x_ = inputs.at(0);
  return kernel_->forward(x_);
}

std::vector<Tensor> Activation::backward(const Tensor& dy) { return {kernel_->backward(dy, x_)}; }

}  // namespace fanstore::trainer
