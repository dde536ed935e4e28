// Pooling layers: windowed max/average pooling and global average pooling on the backend's kernel.
#include "trainer/layers/pooling.hpp"

#include <stdexcept>

namespace fanstore::trainer {

PoolingSpec pooling_spec(int spatial_rank, PoolingKind kind, std::int64_t kernel, std::int64_t stride,
                         std::int64_t padding) {
  const auto r = static_cast<std::size_t>(spatial_rank);
  PoolingSpec s;
  s.kind = kind;
  s.kernel.assign(r, kernel);
  s.stride.assign(r, stride);
  s.padding_lo.assign(r, padding);
  s.padding_hi.assign(r, padding);
  return s;
}

Pooling::Pooling(std::string name, PoolingSpec spec) : Layer(std::move(name)), spec_(std::move(spec)) {
  spec_.validate(this->name());
}

std::string Pooling::kind() const {
  return std::string(spec_.kind == PoolingKind::Max ? "MaxPool" : "AvgPool") + std::to_string(spec_.kernel.size()) +
         "d";
}

Shape Pooling::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  return spec_.output_shape(inputs[0], name());
}

Tensor Pooling::forward(const std::vector<Tensor>& inputs, Mode mode) {
  if (!kernel_) kernel_ = backend().make_pooling(spec_);
  return kernel_->forward(inputs.at(0), mode);
}

std::vector<Tensor> Pooling::backward(Tensor dy) { return {kernel_->backward(dy)}; }

std::string GlobalAveragePooling::kind() const { return "GlobalAvgPool"; }

Shape GlobalAveragePooling::output_shape(const std::vector<Shape>& inputs) const {
  expect_input_count(*this, inputs, 1);
  expect_rank(*this, inputs[0], 4, 5);
  Shape out = inputs[0];
  for (int i = 2; i < out.rank(); ++i) out[i] = 1;
  return out;
}

Tensor GlobalAveragePooling::forward(const std::vector<Tensor>& inputs, Mode mode) {
  const Shape& in = inputs.at(0).shape();
  if (!kernel_ || in != built_for_) {
    PoolingSpec spec;
    spec.kind = PoolingKind::Average;
    for (int i = 2; i < in.rank(); ++i) {
      spec.kernel.push_back(in[i]);
      spec.stride.push_back(1);
      spec.padding_lo.push_back(0);
      spec.padding_hi.push_back(0);
    }
    kernel_ = backend().make_pooling(spec);
    built_for_ = in;
  }
  return kernel_->forward(inputs[0], mode);
}

std::vector<Tensor> GlobalAveragePooling::backward(Tensor dy) { return {kernel_->backward(dy)}; }

}  // namespace fanstore::trainer
