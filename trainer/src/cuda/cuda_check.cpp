// CUDA, cuDNN, cuBLAS and NCCL statuses turned into one-line errors.
#include "cuda/cuda_check.hpp"

#include <cctype>

namespace fanstore::trainer::cuda {

std::string call_name(const char* call) {
  std::string s(call);
  const auto paren = s.find('(');
  s = s.substr(0, paren);
  // Strip namespaces and whitespace around the name ("::cudaSetDevice" -> "cudaSetDevice").
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  const auto colon = s.rfind(':');
  return colon == std::string::npos ? s : s.substr(colon + 1);
}

void fail(const char* call, const std::string& what) { throw CudaError(call_name(call) + ": " + what); }

void fail(cudaError_t status, const char* call) {
  std::string what = std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")";
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
      what += ": a kernel queued before this call failed; CUDA_LAUNCH_BLOCKING=1 makes the error name it";
      break;
    default:
      break;
  }
  fail(call, what);
}

void check(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::string what = cudnnGetErrorString(status);
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);  // cuDNN 9: why, when it knows
  if (detail[0]) what += std::string(" (") + detail + ")";
  fail(call, what);
}

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(call, cublasGetStatusName(status) + std::string(" (") + cublasGetStatusString(status) + ")");
}

void check(ncclResult_t status, const char* call) {
  if (status != ncclSuccess && status != ncclInProgress) fail(call, ncclGetErrorString(status));
}

}  // namespace fanstore::trainer::cuda
