// One-line errors for every CUDA runtime, cuDNN, cuBLAS(Lt) and NCCL call: the call's name and the
// library's own words. Model adds the layer (it wraps each layer's forward and backward).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace fanstore::trainer::cuda {

// Throws CudaError("NAME: WHAT") where NAME is the function name at the start of `call`
// (FS_CHECK passes the whole call expression).
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const char* call, const std::string& what);
// "cudnnConvolutionForward(handle, ...)" -> "cudnnConvolutionForward"
std::string call_name(const char* call);

// A fault inside a running kernel (an illegal address, say) is reported by whichever call comes next, and by
// every call after it: the message then says so, and how to find the kernel.
[[noreturn]] void fail(cudaError_t status, const char* call);
inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) fail(status, call);
}
void check(cudnnStatus_t status, const char* call);
void check(cublasStatus_t status, const char* call);
void check(ncclResult_t status, const char* call);

// A kernel launch: the launch error now (bad configuration), not at the next synchronisation.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace fanstore::trainer::cuda

#define FS_CHECK(call) ::fanstore::trainer::cuda::check((call), #call)
