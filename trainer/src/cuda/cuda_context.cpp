// The CUDA backend's context: device, stream, library handles, memory pool and workspace.
#include "cuda/cuda_context.hpp"

#include <algorithm>
#include <cstdint>

namespace fanstore::trainer::cuda {

CudaContext::CudaContext(int device, Precision precision, bool channels_last, bool deterministic)
    : device_(device), precision_(precision), channels_last_(channels_last), deterministic_(deterministic) {
  FS_CHECK(cudaSetDevice(device_));
  FS_CHECK(cudaGetDeviceProperties(&properties_, device_));
  FS_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FS_CHECK(cudnnCreate(&cudnn_));
  FS_CHECK(cudnnSetStream(cudnn_, stream_));
  FS_CHECK(cublasLtCreate(&cublaslt_));
  // Freed blocks stay in the pool: a training step frees and reallocates the same sizes every step.
  cudaMemPool_t pool = nullptr;
  FS_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  std::uint64_t keep = UINT64_MAX;
  FS_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  // Convolution workspaces up to 1/8 of the device memory (1 GiB on a 80 GB H100 is plenty).
  workspace_limit_ = std::min<std::size_t>(properties_.totalGlobalMem / 8, std::size_t{4} << 30);
}

CudaContext::~CudaContext() {
  // Destructors must not throw: release what was made, ignoring errors of a dying context.
  if (stream_) cudaStreamSynchronize(stream_);
  if (workspace_) cudaFree(workspace_);
  if (cublaslt_) cublasLtDestroy(cublaslt_);
  if (cudnn_) cudnnDestroy(cudnn_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::shared_ptr<Storage> CudaContext::allocate(std::size_t bytes, const std::shared_ptr<CudaContext>& self) {
  void* p = nullptr;
  const std::size_t size = std::max<std::size_t>(bytes, 1);
  FS_CHECK(cudaMallocAsync(&p, size, stream_));
  FS_CHECK(cudaMemsetAsync(p, 0, size, stream_));
  std::shared_ptr<CudaContext> keep = self;
  return std::make_shared<Storage>(Device::Cuda, p, bytes, [keep](void* q) { cudaFreeAsync(q, keep->stream()); });
}

void* CudaContext::workspace(std::size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  // Grow (stream-ordered free of the old one is not needed: cudaFree waits for the device).
  if (workspace_) FS_CHECK(cudaFree(workspace_));
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  FS_CHECK(cudaMalloc(&workspace_, bytes));
  workspace_bytes_ = bytes;
  return workspace_;
}

}  // namespace fanstore::trainer::cuda
