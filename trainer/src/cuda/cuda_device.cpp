// CUDA device discovery: how many devices the runtime sees, and why none when there are none.
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_check.hpp"

namespace fanstore::trainer::cuda {

int device_count(std::string* reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // No driver (cudaErrorInsufficientDriver) or no device (cudaErrorNoDevice): not an error for
    // --device auto, the reason for --device cuda. Clear the sticky error for later calls.
    cudaGetLastError();
    if (reason)
      *reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + ", " + cudaGetErrorString(status);
    return 0;
  }
  if (count == 0 && reason) *reason = "cudaGetDeviceCount reports 0 devices";
  return count;
}

}  // namespace fanstore::trainer::cuda
