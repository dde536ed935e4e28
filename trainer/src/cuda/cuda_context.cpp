// The CUDA backend's context: device, stream, library handles, memory pool and workspace.
#include "cuda/cuda_context.hpp"

#include <algorithm>
#include <cstdint>

namespace fanstore::trainer::cuda {

namespace {

// Page-locked memory usable from any context; made by the prefetch threads, whose current device must be
// ours first (a thread's first CUDA call would otherwise create a context on device 0).
void* pinned(int device, std::size_t bytes) {
  FS_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  FS_CHECK(cudaHostAlloc(&p, std::max<std::size_t>(bytes, 1), cudaHostAllocPortable));
  return p;
}

}  // namespace

CudaContext::CudaContext(int device, Precision precision, bool channels_last, bool deterministic)
    : device_(device),
      precision_(precision),
      channels_last_(channels_last),
      deterministic_(deterministic),
      input_memory_([device](std::size_t bytes) { return pinned(device, bytes); },
                    [device](void* p, std::size_t) {
                      // A prefetch thread may free before it ever allocated: on its own device, not device 0.
                      cudaSetDevice(device);
                      cudaFreeHost(p);
                    }) {
  FS_CHECK(cudaSetDevice(device_));
  FS_CHECK(cudaGetDeviceProperties(&properties_, device_));
  FS_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FS_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  FS_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  FS_CHECK(cudnnCreate(&cudnn_));
  FS_CHECK(cudnnSetStream(cudnn_, stream_));
  FS_CHECK(cublasLtCreate(&cublaslt_));
  // Freed blocks stay in the pool: a training step frees and reallocates the same sizes every step.
  cudaMemPool_t pool = nullptr;
  FS_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  std::uint64_t keep = UINT64_MAX;
  FS_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  // The uploads' own pool, which never makes the copy stream wait for the kernel stream to reuse a block (as
  // the default pool may for blocks freed there): the copy would then queue behind the step it should overlap.
  // Blocks still in use give new ones instead; two or three make the pool's steady state.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_;
  FS_CHECK(cudaMemPoolCreate(&input_pool_, &props));
  int no = 0;
  FS_CHECK(cudaMemPoolSetAttribute(input_pool_, cudaMemPoolReuseAllowInternalDependencies, &no));
  FS_CHECK(cudaMemPoolSetAttribute(input_pool_, cudaMemPoolAttrReleaseThreshold, &keep));
  // Convolution workspaces up to 1/8 of the device memory, at most 4 GiB (an 80 GB H100 or an H200: 4 GiB).
  workspace_limit_ = std::min<std::size_t>(properties_.totalGlobalMem / 8, std::size_t{4} << 30);
}

CudaContext::~CudaContext() {
  // Destructors must not throw: release what was made, ignoring errors of a dying context.
  if (stream_) cudaStreamSynchronize(stream_);
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  if (workspace_) cudaFree(workspace_);
  if (cublaslt_) cublasLtDestroy(cublaslt_);
  if (cudnn_) cudnnDestroy(cudnn_);
  if (input_pool_) cudaMemPoolDestroy(input_pool_);
  if (copied_) cudaEventDestroy(copied_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
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

Tensor CudaContext::upload(const Tensor& t, const std::shared_ptr<CudaContext>& self) {
  // Allocated on the copy stream, not the kernel stream (that would make the copy wait for the step queued
  // there), and not zeroed: the copy writes every byte. Freed on the kernel stream, which waited for the copy.
  void* p = nullptr;
  const std::size_t bytes = t.bytes();
  FS_CHECK(cudaMallocFromPoolAsync(&p, std::max<std::size_t>(bytes, 1), input_pool_, copy_stream_));
  std::shared_ptr<CudaContext> keep = self;
  auto storage =
      std::make_shared<Storage>(Device::Cuda, p, bytes, [keep](void* q) { cudaFreeAsync(q, keep->stream()); });
  FS_CHECK(cudaMemcpyAsync(p, t.raw(), bytes, cudaMemcpyHostToDevice, copy_stream_));
  FS_CHECK(cudaEventRecord(copied_, copy_stream_));
  FS_CHECK(cudaStreamWaitEvent(stream_, copied_, 0));
  return Tensor::on_storage(std::move(storage), t.shape(), t.dtype());
}

void* CudaContext::workspace(std::size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  // Grow (stream-ordered free of the old one is not needed: cudaFree waits for the device).
  if (workspace_) FS_CHECK(cudaFree(workspace_));
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  cudaError_t rc = cudaMalloc(&workspace_, bytes);
  if (rc == cudaErrorMemoryAllocation) {
    // The default pool keeps what the steps freed (release threshold: all of it): hand that back and retry.
    cudaGetLastError();
    cudaMemPool_t pool = nullptr;
    FS_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
    FS_CHECK(cudaStreamSynchronize(stream_));
    FS_CHECK(cudaMemPoolTrimTo(pool, 0));
    workspace_ = nullptr;
    rc = cudaMalloc(&workspace_, bytes);
  }
  FS_CHECK(rc);
  workspace_bytes_ = bytes;
  return workspace_;
}

}  // namespace fanstore::trainer::cuda
