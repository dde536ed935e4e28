// Pooling layers: max and average pooling (2D/3D) and global average pooling (AdaptiveAvgPool to 1).
#pragma once

#include <memory>

#include "trainer/layer.hpp"

namespace fanstore::trainer {

// Cubic/square helper for a rank-2 or rank-3 pooling window.
PoolingSpec pooling_spec(int spatial_rank, PoolingKind kind, std::int64_t kernel, std::int64_t stride,
                         std::int64_t padding = 0);

class Pooling final : public Layer {
 public:
  Pooling(std::string name, PoolingSpec spec);
  std::string kind() const override;
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;
  const PoolingSpec& spec() const { return spec_; }

 private:
  PoolingSpec spec_;
  std::unique_ptr<PoolingKernel> kernel_;
};

// (N, C, *S) -> (N, C, 1, ...): the mean over all spatial positions, as one oneDNN average pooling
// whose window is the whole input (rebuilt if the input size changes).
class GlobalAveragePooling final : public Layer {
 public:
  explicit GlobalAveragePooling(std::string name) : Layer(std::move(name)) {}
  std::string kind() const override;
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;

 private:
  Shape built_for_;
  std::unique_ptr<PoolingKernel> kernel_;
};

}  // namespace fanstore::trainer
