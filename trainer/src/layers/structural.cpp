// Residual add, channel concat, dropout and flatten: simple data movement, hand-rolled on the host.
#include "trainer/layers/structural.hpp"

#include <algorithm>
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
  bool shared_layout = true;
  for (const auto& t : inputs) shared_layout = shared_layout && t.same_layout(inputs[0]);
  // Same layout: add the raw storage (padding included: it is zero in every operand). Otherwise
  // meet in plain layout, which every backend can produce.
  std::vector<Tensor> xs;
  for (const auto& t : inputs) xs.push_back(shared_layout ? t : backend().to_plain(t));
  Tensor y = Tensor::with_layout(xs[0].shape(), xs[0].layout());
  float* out = y.data();
  const std::size_t n = y.capacity();
  std::copy(xs[0].data(), xs[0].data() + n, out);
  for (std::size_t k = 1; k < xs.size(); ++k) {
    const float* in = xs[k].data();
    for (std::size_t i = 0; i < n; ++i) out[i] += in[i];
  }
  return y;
}

std::vector<Tensor> Add::backward(const Tensor& dy) { return std::vector<Tensor>(inputs_, dy); }

// ---- Concat ----

Shape Concat::output_shape(const std::vector<Shape>& inputs) const {
  if (inputs.empty()) throw std::invalid_argument(name() + ": needs at least one input");
  Shape out = inputs[0];
  out[1] = 0;
  for (const auto& s : inputs) {
    Shape a = s, b = inputs[0];
    a[1] = b[1] = 0;
    if (a != b) throw std::invalid_argument(name() + ": cannot concat " + s.to_string() + " with " + inputs[0].to_string());
    out[1] += s[1];
  }
  return out;
}

Tensor Concat::forward(const std::vector<Tensor>& inputs, Mode mode) {
  (void)mode;
  input_shapes_.clear();
  for (const auto& t : inputs) input_shapes_.push_back(t.shape());
  Tensor y = Tensor::zeros(output_shape(input_shapes_));
  const std::int64_t batch = y.shape()[0], inner = y.shape().spatial_size();
  const std::int64_t out_block = y.shape()[1] * inner;
  std::int64_t channel_offset = 0;
  for (const auto& t : inputs) {
    Tensor x = backend().to_plain(t);
    const std::int64_t block = x.shape()[1] * inner;
    for (std::int64_t n = 0; n < batch; ++n)
      std::copy(x.data() + n * block, x.data() + (n + 1) * block, y.data() + n * out_block + channel_offset * inner);
    channel_offset += x.shape()[1];
  }
  return y;
}

std::vector<Tensor> Concat::backward(const Tensor& dy_any) {
  Tensor dy = backend().to_plain(dy_any);
  const std::int64_t batch = dy.shape()[0], inner = dy.shape().spatial_size();
  const std::int64_t out_block = dy.shape()[1] * inner;
  std::vector<Tensor> grads;
  std::int64_t channel_offset = 0;
  for (const auto& s : input_shapes_) {
    Tensor dx = Tensor::zeros(s);
    const std::int64_t block = s[1] * inner;
    for (std::int64_t n = 0; n < batch; ++n) {
      const float* src = dy.data() + n * out_block + channel_offset * inner;
      std::copy(src, src + block, dx.data() + n * block);
    }
    channel_offset += s[1];
    grads.push_back(dx);
  }
  return grads;
}

// ---- Dropout ----

Dropout::Dropout(std::string name, float p, std::uint64_t seed) : Layer(std::move(name)), p_(p), rng_(seed) {
  if (p < 0.f || p >= 1.f) throw std::invalid_argument(this->name() + ": dropout probability must be in [0, 1)");
}

Shape Dropout::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  return inputs[0];
}

Tensor Dropout::forward(const std::vector<Tensor>& inputs, Mode mode) {
  identity_ = mode == Mode::Eval || p_ == 0.f;
  if (identity_) return inputs.at(0);
  Tensor x = backend().to_plain(inputs.at(0));
  shape_ = x.shape();
  const float keep_scale = 1.f / (1.f - p_);
  mask_.resize(static_cast<std::size_t>(x.numel()));
  Tensor y = Tensor::zeros(x.shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    mask_[static_cast<std::size_t>(i)] = rng_.bernoulli(p_) ? 0.f : keep_scale;
    y[i] = x[i] * mask_[static_cast<std::size_t>(i)];
  }
  return y;
}

std::vector<Tensor> Dropout::backward(const Tensor& dy_any) {
  if (identity_) return {dy_any};
  Tensor dy = backend().to_plain(dy_any);
  Tensor dx = Tensor::zeros(shape_);
  for (std::int64_t i = 0; i < dx.numel(); ++i) dx[i] = dy[i] * mask_[static_cast<std::size_t>(i)];
  return {dx};
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

std::vector<Tensor> Flatten::backward(const Tensor& dy) { return {backend().to_plain(dy).reshaped(input_shape_)}; }

}  // namespace fanstore::trainer
