// RAII cuDNN descriptors set from our shapes, types and layouts (plain NCHW/NCDHW or channels-last).
#pragma once

#include <vector>

#include "cuda/cuda_check.hpp"
#include "trainer/shape.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer::cuda {

cudnnDataType_t cudnn_type(DType type);

// The name of the create call of each descriptor type, for the error message.
inline const char* create_call(cudnnTensorDescriptor_t*) { return "cudnnCreateTensorDescriptor"; }
inline const char* create_call(cudnnFilterDescriptor_t*) { return "cudnnCreateFilterDescriptor"; }
inline const char* create_call(cudnnConvolutionDescriptor_t*) { return "cudnnCreateConvolutionDescriptor"; }
inline const char* create_call(cudnnPoolingDescriptor_t*) { return "cudnnCreatePoolingDescriptor"; }

// One cuDNN descriptor, created and destroyed with it.
template <class Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class Descriptor {
 public:
  Descriptor() { check(Create(&d_), create_call(&d_)); }
  ~Descriptor() { Destroy(d_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Handle get() const { return d_; }

 protected:
  Handle d_ = nullptr;
};

class TensorDescriptor
    : public Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> {
 public:
  void set(const Shape& shape, DType type, bool channels_last);
};

class FilterDescriptor
    : public Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor> {
 public:
  // dims (K, C, *k); channels-last = cuDNN's NHWC filter format (K, *k, C).
  void set(const Shape& dims, DType type, bool channels_last);
};

class ConvolutionDescriptor : public Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                                cudnnDestroyConvolutionDescriptor> {
 public:
  // Symmetric padding per spatial dimension; accumulation in float whatever the data type.
  void set(const std::vector<std::int64_t>& padding, const std::vector<std::int64_t>& stride,
           const std::vector<std::int64_t>& dilation);
  void set_math(cudnnMathType_t math) { FS_CHECK(cudnnSetConvolutionMathType(d_, math)); }
};

class PoolingDescriptor
    : public Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor> {
 public:
  void set(cudnnPoolingMode_t mode, const std::vector<std::int64_t>& window, const std::vector<std::int64_t>& padding,
           const std::vector<std::int64_t>& stride);
};

}  // namespace fanstore::trainer::cuda
