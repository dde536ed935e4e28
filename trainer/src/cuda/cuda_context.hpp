// What every CUDA kernel of one backend shares: the device, the stream, the cuDNN and cuBLASLt
// handles, one workspace and the convolution algorithm cache. Storage made by the backend keeps
// the context alive, so device memory can be freed after the backend is gone.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

#include "cuda/cuda_check.hpp"
#include "trainer/precision.hpp"
#include "trainer/recycling_memory.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer::cuda {

class CudaContext {
 public:
  CudaContext(int device, Precision precision, bool channels_last, bool deterministic);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // The input batches' stream: their uploads run on it beside the kernels of the step before.
  cudaStream_t copy_stream() const { return copy_stream_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  const cudaDeviceProp& properties() const { return properties_; }
  Precision precision() const { return precision_; }
  DType activation_type() const { return activation_dtype(precision_); }
  bool channels_last() const { return channels_last_; }
  bool deterministic() const { return deterministic_; }

  // Zero-filled device memory, stream-ordered (cudaMallocAsync from a pool that keeps freed blocks).
  std::shared_ptr<Storage> allocate(std::size_t bytes, const std::shared_ptr<CudaContext>& self);
  // At least `bytes` of scratch, valid until the next call (all kernels run in order on one stream).
  void* workspace(std::size_t bytes);
  // `t` (plain, host) copied to new device memory on the copy stream; the kernel stream waits for the
  // copy before the work queued after this call.
  Tensor upload(const Tensor& t, const std::shared_ptr<CudaContext>& self);
  // Page-locked host memory for input batches (RecyclingMemory over cudaHostAlloc).
  std::pmr::memory_resource* input_memory() { return &input_memory_; }
  std::size_t workspace_limit() const { return workspace_limit_; }

  // Convolution algorithms found once per (operation, shapes, layout, type) key, shared by every
  // layer of that shape (ResNet repeats its blocks).
  struct Algorithm {
    int algorithm = 0;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
    int math = 0;       // cudnnMathType_t it was measured with
    std::size_t workspace = 0;
  };
  std::unordered_map<std::string, Algorithm>& algorithm_cache() { return algorithms_; }

 private:
  int device_;
  Precision precision_;
  bool channels_last_, deterministic_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t copied_ = nullptr;        // recorded after each upload, waited for by stream_
  cudaMemPool_t input_pool_ = nullptr;  // the uploads' device memory (cuda_context.cpp says why apart)
  cudnnHandle_t cudnn_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudaDeviceProp properties_{};
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::size_t workspace_limit_ = 0;
  std::unordered_map<std::string, Algorithm> algorithms_;
  RecyclingMemory input_memory_;
};

}  // namespace fanstore::trainer::cuda
