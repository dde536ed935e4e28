// Element-wise activation layers: ReLU, LeakyReLU, tanh, constant scale (oneDNN eltwise on CPU).
#pragma once

#include <memory>

#include "trainer/layer.hpp"

namespace fanstore::trainer {

class Activation final : public Layer {
 public:
  Activation(std::string name, EltwiseSpec spec);
  std::string kind() const override;
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;
  Saves saves() const override { return Saves::kOutput; }

 private:
  EltwiseSpec spec_;
  std::unique_ptr<EltwiseKernel> kernel_;
  Tensor y_;  // the forward's output, which backward reads
};

inline EltwiseSpec relu() { return {EltwiseKind::ReLU, 0.f}; }
inline EltwiseSpec leaky_relu(float negative_slope) { return {EltwiseKind::LeakyReLU, negative_slope}; }
inline EltwiseSpec tanh_activation() { return {EltwiseKind::Tanh, 0.f}; }
inline EltwiseSpec scale_by(float factor) { return {EltwiseKind::Scale, factor}; }

}  // namespace fanstore::trainer
