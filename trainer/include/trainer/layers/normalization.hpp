// Normalisation layers: batch norm (running statistics, PyTorch momentum) and affine instance norm.
#pragma once

#include <memory>

#include "trainer/layer.hpp"

namespace fanstore::trainer {

// PyTorch BatchNorm{1,2,3}d: Train normalises with batch statistics and updates
// running = (1 - momentum) * running + momentum * batch (unbiased variance); Eval uses running stats.
class BatchNorm final : public Layer {
 public:
  // initial_scale: gamma's initial value (1 in PyTorch; 0 for the last BN of a residual branch
  // under ResNet's zero_init_residual, Goyal et al. section 5.1).
  BatchNorm(std::string name, std::int64_t channels, float epsilon = 1e-5f, float momentum = 0.1f,
            float initial_scale = 1.f);
  std::string kind() const override;
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  void initialize(Rng& rng) override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;
  Saves saves() const override { return Saves::kInput; }
  float epsilon() const { return epsilon_; }
  float momentum() const { return momentum_; }

 private:
  void declare_parameters() override;
  std::int64_t channels_;
  float epsilon_, momentum_, initial_scale_;
  ParameterHandle gamma_, beta_;             // "weight", "bias": (C)
  BufferHandle running_mean_, running_var_;  // (C)
  Tensor batch_mean_, batch_var_;            // (C), this step's statistics (biased variance), on the backend
  std::unique_ptr<BatchNormKernel> kernel_;
};

// PyTorch InstanceNorm{2,3}d(affine=True, track_running_stats=False): statistics per (sample,
// channel) over the spatial extent, in Train and Eval alike, on the backend's normalisation ops
// (sums in double; oneDNN has no instance norm primitive). A spatially split version sums the
// statistics over its group between the ops.
class InstanceNorm final : public Layer {
 public:
  InstanceNorm(std::string name, std::int64_t channels, float epsilon = 1e-5f);
  std::string kind() const override;
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  void initialize(Rng& rng) override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;
  Saves saves() const override { return Saves::kInput; }
  float epsilon() const { return epsilon_; }

 private:
  void declare_parameters() override;
  std::int64_t channels_;
  float epsilon_;
  ParameterHandle gamma_, beta_;  // (C)
  Tensor x_;                      // (N, C, *S) the last forward's input, plain
  Tensor sums_;                   // (N*C, 2) F64: [sum x, sum x^2] per plane
};

}  // namespace fanstore::trainer
