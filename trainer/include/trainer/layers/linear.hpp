// Fully connected layer (PyTorch nn.Linear): (N, in) -> (N, out), weight (out, in).
#pragma once

#include <memory>

#include "trainer/layer.hpp"

namespace fanstore::trainer {

class Linear final : public Layer {
 public:
  Linear(std::string name, std::int64_t in_features, std::int64_t out_features, bool bias = true);
  std::string kind() const override { return "Linear"; }
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  void initialize(Rng& rng) override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;
  Saves saves() const override { return Saves::kInput; }

 private:
  void declare_parameters() override;
  std::int64_t in_, out_;
  bool bias_;
  ParameterHandle weight_;  // (out, in)
  ParameterHandle bias_h_;  // (out)
  std::unique_ptr<InnerProductKernel> kernel_;
  Tensor x_;  // (N, in)
};

}  // namespace fanstore::trainer
