// Convolution and transposed convolution layers, 2D and 3D (PyTorch Conv{2,3}d / ConvTranspose{2,3}d).
#pragma once

#include <memory>

#include "trainer/layer.hpp"

namespace fanstore::trainer {

// Cubic/square helper: rank-2 or rank-3 spec with the same k, s, p, d in every dimension.
ConvolutionSpec convolution_spec(int spatial_rank, std::int64_t in_channels, std::int64_t out_channels,
                                 std::int64_t kernel, std::int64_t stride = 1, std::int64_t padding = 0,
                                 bool bias = true, std::int64_t dilation = 1, bool transposed = false);

class Convolution final : public Layer {
 public:
  Convolution(std::string name, ConvolutionSpec spec);
  std::string kind() const override;
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  void initialize(Rng& rng) override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;
  Saves saves() const override { return Saves::kInput; }
  const ConvolutionSpec& spec() const { return spec_; }

 private:
  void declare_parameters() override;
  ConvolutionSpec spec_;
  ParameterHandle weight_;  // (Cout, Cin, *k), transposed: (Cin, Cout, *k)
  ParameterHandle bias_;    // (Cout), only when spec_.bias
  std::unique_ptr<ConvolutionKernel> kernel_;
  Tensor x_;  // saved input (N, Cin, *in)
};

}  // namespace fanstore::trainer
