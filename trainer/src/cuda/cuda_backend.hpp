// The CUDA backend's entry points. Free of CUDA headers, so plain C++ (backend selection) includes it.
#pragma once

#include <memory>
#include <string>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"
#include "trainer/precision.hpp"

struct CUstream_st;  // cudaStream_t's struct, declared globally like the CUDA runtime does

namespace fanstore::trainer::cuda {

struct CudaBackendOptions {
  int device = 0;                         // CUDA device ordinal
  Precision precision = Precision::FP32;  // activation type; parameters and gradients stay fp32
  // Activations of convolution, pooling and batch norm in NHWC/NDHWC (cuDNN's tensor-core layout).
  // Default: on for bf16/fp16, off for fp32 (plain NCHW, where cuDNN's fp32 kernels are as fast).
  int channels_last = -1;  // -1 default, 0 off, 1 on
  // Convolution algorithms limited to deterministic ones, so a resumed run repeats bit for bit.
  bool deterministic = true;
};

// Devices the CUDA runtime sees; 0 with `reason` set (cudaGetDeviceCount's error, e.g. no driver).
int device_count(std::string* reason);

// Throws CudaError naming the failing call when the device cannot be used.
std::shared_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options);

// Gradient sums over NCCL between the ranks of `host` (one GPU each), on a stream of their own
// that follows `backend`'s compute stream; everything else goes through `host`.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Backend& backend);

// The compute stream of a CUDA backend, as an opaque handle (cudaStream_t); throws for another backend.
::CUstream_st* stream_of(Backend& backend);

}  // namespace fanstore::trainer::cuda
