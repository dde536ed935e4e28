// Element-wise activation layer: forwards to the backend's eltwise kernel, keeping the input layout. It keeps
// its output for backward, not its input: the next layer keeps the output anyway, so the input (a
// convolution's or a normalisation's output) is freed after the forward (as PyTorch's inplace ReLU does).
#include "trainer/layers/activation.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace fanstore::trainer {

Activation::Activation(std::string name, EltwiseSpec spec) : Layer(std::move(name)), spec_(spec) {
  // Backward reads the output (EltwiseKernel::backward): a negative slope would lose the input's sign.
  if (spec_.kind == EltwiseKind::LeakyReLU && !(spec_.alpha >= 0.f))
    throw std::invalid_argument(this->name() + ": LeakyReLU needs a non-negative slope, got " +
                                std::to_string(spec_.alpha));
}

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
  if (!kernel_) kernel_ = backend().make_eltwise(spec_);
  Tensor y = kernel_->forward(inputs.at(0));
  y_ = mode == Mode::Train ? y : Tensor();  // inference keeps nothing: its outputs go after their last reader
  return y;
}

std::vector<Tensor> Activation::backward(Tensor dy) {
  if (!y_.defined()) throw std::logic_error(name() + ": backward needs a forward in Mode::Train first");
  Tensor y = std::move(y_);  // not needed after this
  return {kernel_->backward(std::move(dy), y)};
}

}  // namespace fanstore::trainer
