// Residual add, channel concat, dropout and flatten: data movement on the backend's ops.
#include "trainer/layers/structural.hpp"

#include <stdexcept>

namespace fanstore::trainer {

// ---- Add ----

Shape Add::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, inputs_);
  for (const auto& s : inputs)
    if (s != inputs[0])
      throw std::invalid_argument(name() + ": cannot add " + s.to_string() + " to " + inputs[0].to_string());
  return inputs[0];
}

Tensor Add::forward(const std::vector<Tensor>& inputs, Mode mode) {
  (void)mode;
  return backend().add(inputs);
}

std::vector<Tensor> Add::backward(Tensor dy) { return std::vector<Tensor>(inputs_, dy); }

// ---- Concat ----

Shape Concat::output_shape(const std::vector<Shape>& inputs) const {
  if (inputs.empty()) throw std::invalid_argument(name() + ": needs at least one input");
  Shape out = inputs[0];
  out[1] = 0;
  for (const auto& s : inputs) {
    Shape a = s, b = inputs[0];
    a[1] = b[1] = 0;
    if (a != b)
      throw std::invalid_argument(name() + ": cannot concat " + s.to_string() + " with " + inputs[0].to_string());
    out[1] += s[1];
  }
  return out;
}

Tensor Concat::forward(const std::vector<Tensor>& inputs, Mode mode) {
  (void)mode;
  channels_.clear();
  for (const auto& t : inputs) channels_.push_back(t.shape()[1]);
  return backend().concat_channels(inputs);
}

std::vector<Tensor> Concat::backward(Tensor dy) { return backend().split_channels(dy, channels_); }

// ---- Dropout ----

Dropout::Dropout(std::string name, float p, std::uint64_t seed) : Layer(std::move(name)), p_(p), seed_(seed) {
  if (p < 0.f || p >= 1.f) throw std::invalid_argument(this->name() + ": dropout probability must be in [0, 1)");
}

Shape Dropout::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  return inputs[0];
}

Tensor Dropout::forward(const std::vector<Tensor>& inputs, Mode mode) {
  identity_ = mode == Mode::Eval || p_ == 0.f;
  if (identity_) return inputs.at(0);
  last_ = DropoutMask{p_, seed_, step_++, placement_};
  return backend().dropout(inputs[0], last_);
}

std::vector<Tensor> Dropout::backward(Tensor dy) {
  if (identity_) return {dy};
  return {backend().dropout(dy, last_)};
}

// ---- Flatten ----

Shape Flatten::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  expect_rank(*this, inputs[0], 2, 5);
  return Shape{inputs[0][0], inputs[0].numel() / inputs[0][0]};
}

Tensor Flatten::forward(const std::vector<Tensor>& inputs, Mode mode) {
  (void)mode;
  input_shape_ = inputs.at(0).shape();
  return backend().to_plain(inputs[0]).reshaped(output_shape({input_shape_}));
}

std::vector<Tensor> Flatten::backward(Tensor dy) { return {backend().to_plain(dy).reshaped(input_shape_)}; }

}  // namespace fanstore::trainer
