// RAII cuDNN descriptors set from our shapes, types and layouts (plain NCHW/NCDHW or channels-last).
#pragma once

#include <vector>

#include "cuda/cuda_check.hpp"
#include "trainer/shape.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer::cuda {

cudnnDataType_t cudnn_type(DType type);

class TensorDescriptor {
 public:
  TensorDescriptor() { FS_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(d_); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  void set(const Shape& shape, DType type, bool channels_last);
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDescriptor {
 public:
  FilterDescriptor() { FS_CHECK(cudnnCreateFilterDescriptor(&d_)); }
  ~FilterDescriptor() { cudnnDestroyFilterDescriptor(d_); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  // dims (K, C, *k); channels-last = cuDNN's NHWC filter format (K, *k, C).
  void set(const Shape& dims, DType type, bool channels_last);
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor() { FS_CHECK(cudnnCreateConvolutionDescriptor(&d_)); }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(d_); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  // Symmetric padding per spatial dimension; accumulation in float whatever the data type.
  void set(const std::vector<std::int64_t>& padding, const std::vector<std::int64_t>& stride,
           const std::vector<std::int64_t>& dilation);
  void set_math(cudnnMathType_t math) { FS_CHECK(cudnnSetConvolutionMathType(d_, math)); }
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

class PoolingDescriptor {
 public:
  PoolingDescriptor() { FS_CHECK(cudnnCreatePoolingDescriptor(&d_)); }
  ~PoolingDescriptor() { cudnnDestroyPoolingDescriptor(d_); }
  PoolingDescriptor(const PoolingDescriptor&) = delete;
  PoolingDescriptor& operator=(const PoolingDescriptor&) = delete;
  void set(cudnnPoolingMode_t mode, const std::vector<std::int64_t>& window, const std::vector<std::int64_t>& padding,
           const std::vector<std::int64_t>& stride);
  cudnnPoolingDescriptor_t get() const { return d_; }

 private:
  cudnnPoolingDescriptor_t d_ = nullptr;
};

}  // namespace fanstore::trainer::cuda
