// Device helpers shared by the CUDA backend's kernels: element loads/stores in float for the
// activation dtypes, the dtype dispatch, launch sizes, and a deterministic segmented sum.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "cuda/cuda_check.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Runs `body` with T the C++ type of `dtype`, for kernels that compute in float. F64 tensors hold
// statistics sums, which no such kernel takes (the CPU's element ops take F32 only): refused, not narrowed.
template <class Body>
void dispatch(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::F32: body(float{}); return;
    case DType::F16: body(__half{}); return;
    case DType::BF16: body(__nv_bfloat16{}); return;
    case DType::F64:
      throw std::invalid_argument(
          "CUDA kernels compute in float: F64 tensors (statistics sums) are "
          "not their operands");
  }
  throw std::invalid_argument("CUDA kernels: unknown dtype");
}
// The same for kernels that only move elements (layout transposes): every dtype, F64 too.
template <class Body>
void dispatch_moves(DType dtype, Body&& body) {
  if (dtype == DType::F64) return body(double{});
  dispatch(dtype, body);
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements (at most 2^20 blocks; the loop covers the rest).
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

#define FS_GRID_STRIDE(i, n)                                                                       \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// ---- deterministic segmented sums ----
// sum over i in [0, size) of f(group, i) (a double2: two sums at once) for every group, in a fixed
// order: each group is cut into the same chunks every time, each block reduces its chunk in a
// fixed tree, and a second kernel adds the chunks in order. So a GPU run repeats bit for bit
// (atomics would add in arrival order).
struct Sum2 {
  double a, b;
};

template <class F>
__global__ void reduce_chunks(F f, std::int64_t size, std::int64_t chunk, int chunks, Sum2* partial) {
  __shared__ double sa[kThreads], sb[kThreads];
  const std::int64_t group = blockIdx.x;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk;
  const std::int64_t end = begin + chunk < size ? begin + chunk : size;
  double a = 0, b = 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const Sum2 v = f(group, i);
    a += v.a;
    b += v.b;
  }
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      sa[threadIdx.x] += sa[threadIdx.x + stride];
      sb[threadIdx.x] += sb[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[group * chunks + blockIdx.y] = Sum2{sa[0], sb[0]};
}

// A template so every translation unit that launches it has its own instance (no relocatable
// device code needed).
template <class Unused = void>
__global__ void add_chunks(const Sum2* partial, int chunks, std::int64_t groups, double* out) {
  FS_GRID_STRIDE(g, groups) {
    double a = 0, b = 0;
    for (int k = 0; k < chunks; ++k) {
      a += partial[g * chunks + k].a;
      b += partial[g * chunks + k].b;
    }
    out[2 * g] = a;
    out[2 * g + 1] = b;
  }
}

// out: device, 2 doubles per group (a then b).
template <class F>
void reduce_groups(F f, std::int64_t groups, std::int64_t size, double* out, cudaStream_t stream) {
  if (groups <= 0) return;
  // At most 512 chunks of at least 4 elements per thread: enough blocks to fill a GPU for one
  // group, few enough partial sums to add serially.
  std::int64_t chunk = (size + 511) / 512;
  if (chunk < 4 * kThreads) chunk = 4 * kThreads;
  const int chunks = static_cast<int>(size > 0 ? (size + chunk - 1) / chunk : 1);
  Sum2* partial = nullptr;
  FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), sizeof(Sum2) * static_cast<std::size_t>(groups * chunks),
                           stream));
  reduce_chunks<<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(chunks)), kThreads, 0, stream>>>(
      f, size, chunk, chunks, partial);
  check_launch("reduce_chunks");
  add_chunks<><<<blocks_for(groups), kThreads, 0, stream>>>(partial, chunks, groups, out);
  check_launch("add_chunks");
  FS_CHECK(cudaFreeAsync(partial, stream));
}

}  // namespace fanstore::trainer::cuda
