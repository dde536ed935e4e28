// Convolution / transposed convolution layer: parameters, PyTorch initialisation, forward/backward.
#include "trainer/layers/convolution.hpp"

#include <cmath>
#include <stdexcept>

namespace fanstore::trainer {

ConvolutionSpec convolution_spec(int spatial_rank, std::int64_t in_channels, std::int64_t out_channels,
                                 std::int64_t kernel, std::int64_t stride, std::int64_t padding, bool bias,
                                 std::int64_t dilation, bool transposed) {
  const auto r = static_cast<std::size_t>(spatial_rank);
  ConvolutionSpec s;
  s.in_channels = in_channels;
  s.out_channels = out_channels;
  s.kernel.assign(r, kernel);
  s.stride.assign(r, stride);
  s.padding_lo.assign(r, padding);
  s.padding_hi.assign(r, padding);
  s.dilation.assign(r, dilation);
  s.bias = bias;
  s.transposed = transposed;
  return s;
}

Convolution::Convolution(std::string name, ConvolutionSpec spec) : Layer(std::move(name)), spec_(std::move(spec)) {
  spec_.validate(this->name());
}

std::string Convolution::kind() const {
  return std::string(spec_.transposed ? "ConvTranspose" : "Conv") + std::to_string(spec_.kernel.size()) + "d";
}

void Convolution::declare_parameters() {
  Shape w{spec_.transposed ? spec_.in_channels : spec_.out_channels,
          spec_.transposed ? spec_.out_channels : spec_.in_channels};
  for (auto k : spec_.kernel) w.dims.push_back(k);
  weight_ = declare_parameter("weight", w);
  if (spec_.bias) bias_ = declare_parameter("bias", Shape{spec_.out_channels});
  kernel_ = backend().make_convolution(spec_);
}

Shape Convolution::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  return spec_.output_shape(inputs[0], name());
}

void Convolution::initialize(Rng& rng) {
  // PyTorch: kaiming_uniform_(a=sqrt(5)) gives bound 1/sqrt(fan_in); fan_in uses weight dim 1, which
  // for a transposed convolution is its *output* channel count.
  Tensor w = table().value(weight_);
  const double fan_in = static_cast<double>(w.numel() / w.shape()[0]);
  const float bound = static_cast<float>(1.0 / std::sqrt(fan_in));
  for (std::int64_t i = 0; i < w.numel(); ++i) w[i] = rng.uniform_float(-bound, bound);
  if (spec_.bias) {
    Tensor b = table().value(bias_);
    for (std::int64_t i = 0; i < b.numel(); ++i) b[i] = rng.uniform_float(-bound, bound);
  }
}

Tensor Convolution::forward(const std::vector<Tensor>& inputs, Mode mode) {
  x_ = mode == Mode::Train ? inputs.at(0) : Tensor();  // inference keeps nothing
  Tensor b = spec_.bias ? table().value(bias_) : Tensor();
  return kernel_->forward(inputs.at(0), table().value(weight_), spec_.bias ? &b : nullptr, mode);
}

std::vector<Tensor> Convolution::backward(Tensor dy) {
  if (!x_.defined()) throw std::logic_error(name() + ": backward needs a forward in Mode::Train first");
  const Tensor x = std::move(x_);  // kept for this backward only: it goes when backward returns
  Tensor dx = input_gradient() ? kernel_->backward_data(dy, table().value(weight_)) : Tensor();
  table().drop_values(parameter_handles());  // sharded weights: gone before the whole gradient comes
  Tensor dw = table().gradient(weight_);
  Tensor db = spec_.bias ? table().gradient(bias_) : Tensor();
  kernel_->backward_weights(x, dy, dw, spec_.bias ? &db : nullptr);
  return {dx};
}

}  // namespace fanstore::trainer
