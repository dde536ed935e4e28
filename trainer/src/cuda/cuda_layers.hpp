// Factories of the CUDA backend's per-layer kernels (cuDNN convolution, pooling and batch norm,
// cuBLASLt inner product, our activation kernels), and the channels-last layout they share.
#pragma once

#include <memory>

#include "cuda/cuda_context.hpp"
#include "trainer/backend.hpp"

namespace fanstore::trainer::cuda {

// NHWC / NDHWC storage of an (N, C, *S) tensor: element (n, c, s) at (n * S + s) * C + c.
class ChannelsLast final : public NativeLayout {
 public:
  explicit ChannelsLast(std::size_t elements) : elements_(elements) {}
  std::size_t element_capacity() const override { return elements_; }
  bool same_as(const NativeLayout& other) const override {
    return dynamic_cast<const ChannelsLast*>(&other) != nullptr;
  }
  std::string describe() const override { return "cuda-channels-last"; }

 private:
  std::size_t elements_;
};

inline bool is_channels_last(const Tensor& t) {
  return t.layout() && dynamic_cast<const ChannelsLast*>(t.layout().get());
}

std::unique_ptr<ConvolutionKernel> make_cudnn_convolution(const ConvolutionSpec& spec, Backend& backend,
                                                          std::shared_ptr<CudaContext> ctx);
std::unique_ptr<PoolingKernel> make_cudnn_pooling(const PoolingSpec& spec, Backend& backend,
                                                  std::shared_ptr<CudaContext> ctx);
std::unique_ptr<BatchNormKernel> make_cudnn_batch_norm(float epsilon, Backend& backend,
                                                       std::shared_ptr<CudaContext> ctx);
std::unique_ptr<EltwiseKernel> make_cuda_eltwise(const EltwiseSpec& spec, Backend& backend,
                                                 std::shared_ptr<CudaContext> ctx);
std::unique_ptr<InnerProductKernel> make_cublaslt_inner_product(bool bias, Backend& backend,
                                                                std::shared_ptr<CudaContext> ctx);

}  // namespace fanstore::trainer::cuda
