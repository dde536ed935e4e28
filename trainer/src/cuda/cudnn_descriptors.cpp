// cuDNN descriptors from shapes, types and layouts.
#include "cuda/cudnn_descriptors.hpp"

#include "ops/strided_dims.hpp"

#include <stdexcept>

namespace fanstore::trainer::cuda {
namespace {

std::vector<int> ints(const std::vector<std::int64_t>& v) { return std::vector<int>(v.begin(), v.end()); }

}  // namespace

cudnnDataType_t cudnn_type(DType type) {
  switch (type) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F64: return CUDNN_DATA_DOUBLE;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
  }
  throw std::invalid_argument("cuDNN: unknown dtype");
}

void TensorDescriptor::set(const Shape& shape, DType type, bool channels_last) {
  std::vector<int> dims, strides;
  ops::strided_dims(shape, channels_last, dims, strides);
  FS_CHECK(
      cudnnSetTensorNdDescriptor(d_, cudnn_type(type), static_cast<int>(dims.size()), dims.data(), strides.data()));
}

void FilterDescriptor::set(const Shape& dims, DType type, bool channels_last) {
  const auto d = ints(dims.dims);
  FS_CHECK(cudnnSetFilterNdDescriptor(d_, cudnn_type(type), channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                      static_cast<int>(d.size()), d.data()));
}

void ConvolutionDescriptor::set(const std::vector<std::int64_t>& padding, const std::vector<std::int64_t>& stride,
                                const std::vector<std::int64_t>& dilation) {
  const auto p = ints(padding), s = ints(stride), d = ints(dilation);
  FS_CHECK(cudnnSetConvolutionNdDescriptor(d_, static_cast<int>(p.size()), p.data(), s.data(), d.data(),
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
}

void PoolingDescriptor::set(cudnnPoolingMode_t mode, const std::vector<std::int64_t>& window,
                            const std::vector<std::int64_t>& padding, const std::vector<std::int64_t>& stride) {
  const auto w = ints(window), p = ints(padding), s = ints(stride);
  FS_CHECK(cudnnSetPoolingNdDescriptor(d_, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(w.size()), w.data(), p.data(),
                                       s.data()));
}

}  // namespace fanstore::trainer::cuda
