// Optimizer updates on the GPU, element for element the CPU backend's formulas (optim.hpp).
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/cuda_kernels.hpp"
#include "cuda/device_common.cuh"

namespace fanstore::trainer::cuda::kernels {
namespace {

__global__ void sgd_kernel(float* w, const float* g, float* buf, std::int64_t n, SgdUpdate u) {
  FS_GRID_STRIDE(i, n) {
    float d = g[i] + u.weight_decay * w[i];
    if (u.momentum != 0.f) {
      buf[i] = u.momentum * buf[i] + d;
      d = u.nesterov ? d + u.momentum * buf[i] : buf[i];
    }
    w[i] -= u.lr * d;
  }
}

__global__ void adam_kernel(float* w, const float* g, float* m, float* v, std::int64_t n, AdamUpdate u, float step_size,
                            float sqrt_correction2) {
  FS_GRID_STRIDE(i, n) {
    const float d = g[i] + u.weight_decay * w[i];
    m[i] = u.beta1 * m[i] + (1.f - u.beta1) * d;
    v[i] = u.beta2 * v[i] + (1.f - u.beta2) * d * d;
    w[i] -= step_size * m[i] / (sqrtf(v[i]) / sqrt_correction2 + u.epsilon);
  }
}

// offsets: segments + 1 entries; norms: [|w|^2, |g|^2] per segment (0 for excluded ones).
__global__ void lars_kernel(float* w, const float* g, float* buf, std::int64_t n, const std::int64_t* offsets,
                            const std::uint8_t* excluded, const double* norms, std::int64_t segments, LarsUpdate u) {
  FS_GRID_STRIDE(i, n) {
    std::int64_t lo = 0, hi = segments - 1;  // the segment holding i: offsets[seg] <= i < offsets[seg + 1]
    while (lo < hi) {
      const std::int64_t mid = (lo + hi + 1) / 2;
      if (offsets[mid] <= i) lo = mid;
      else hi = mid - 1;
    }
    float wd = 0.f, trust = 1.f;
    if (!excluded[lo]) {
      wd = u.weight_decay;
      const double wn = sqrt(norms[2 * lo]), gn = sqrt(norms[2 * lo + 1]);
      if (wn > 0 && gn > 0)
        trust = static_cast<float>(static_cast<double>(u.eta) * wn / (gn + static_cast<double>(wd) * wn));
    }
    const float d = trust * (g[i] + wd * w[i]);
    buf[i] = u.momentum * buf[i] + d;
    w[i] -= u.lr * buf[i];
  }
}

}  // namespace

void sgd(float* w, const float* g, float* momentum, std::int64_t n, const SgdUpdate& u, cudaStream_t stream) {
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, momentum, n, u);
  check_launch("sgd_kernel");
}

void adam(float* w, const float* g, float* m, float* v, std::int64_t n, const AdamUpdate& u, cudaStream_t stream) {
  // The bias corrections exactly as the CPU backend computes them (in double, then float).
  const double correction1 = 1.0 - std::pow(static_cast<double>(u.beta1), static_cast<double>(u.step));
  const double correction2 = 1.0 - std::pow(static_cast<double>(u.beta2), static_cast<double>(u.step));
  adam_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, m, v, n, u, static_cast<float>(u.lr / correction1),
                                                      static_cast<float>(std::sqrt(correction2)));
  check_launch("adam_kernel");
}

void lars(float* w, const float* g, float* momentum, const std::vector<ParameterSegment>& segments, std::int64_t n,
          const LarsUpdate& u, cudaStream_t stream) {
  const auto count = static_cast<std::int64_t>(segments.size());
  if (count == 0) return;
  std::vector<std::int64_t> offsets;
  std::vector<std::uint8_t> excluded;
  std::int64_t end = 0;  // the kernel finds an element's segment by binary search: the segments must tile [0, n)
  for (const auto& s : segments) {
    if (static_cast<std::int64_t>(s.offset) != end)
      throw std::invalid_argument("lars: parameter segments must be contiguous and in order (one at " +
                                  std::to_string(s.offset) + ", expected " + std::to_string(end) + ")");
    end += static_cast<std::int64_t>(s.count);
    offsets.push_back(static_cast<std::int64_t>(s.offset));
    excluded.push_back(s.lars_excluded ? 1 : 0);
  }
  if (end != n)
    throw std::invalid_argument("lars: parameter segments cover " + std::to_string(end) + " of " + std::to_string(n) +
                                " elements");
  offsets.push_back(n);
  std::int64_t* d_offsets = nullptr;
  std::uint8_t* d_excluded = nullptr;
  double* norms = nullptr;
  FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d_offsets), sizeof(std::int64_t) * offsets.size(), stream));
  FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d_excluded), excluded.size(), stream));
  FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&norms), sizeof(double) * 2 * segments.size(), stream));
  // Pageable host sources: the copies complete (into staging) before cudaMemcpyAsync returns.
  FS_CHECK(cudaMemcpyAsync(d_offsets, offsets.data(), sizeof(std::int64_t) * offsets.size(), cudaMemcpyHostToDevice,
                           stream));
  FS_CHECK(cudaMemcpyAsync(d_excluded, excluded.data(), excluded.size(), cudaMemcpyHostToDevice, stream));
  FS_CHECK(cudaMemsetAsync(norms, 0, sizeof(double) * 2 * segments.size(), stream));
  for (std::int64_t k = 0; k < count; ++k) {
    const auto& s = segments[static_cast<std::size_t>(k)];
    if (s.lars_excluded) continue;
    const float* ws = w + s.offset;
    const float* gs = g + s.offset;
    reduce_groups(
        [=] __device__(std::int64_t, std::int64_t i) {
          return Sum2{static_cast<double>(ws[i]) * ws[i], static_cast<double>(gs[i]) * gs[i]};
        },
        1, static_cast<std::int64_t>(s.count), norms + 2 * k, stream);
  }
  lars_kernel<<<blocks_for(n), kThreads, 0, stream>>>(w, g, momentum, n, d_offsets, d_excluded, norms, count, u);
  check_launch("lars_kernel");
  FS_CHECK(cudaFreeAsync(norms, stream));
  FS_CHECK(cudaFreeAsync(d_excluded, stream));
  FS_CHECK(cudaFreeAsync(d_offsets, stream));
}

}  // namespace fanstore::trainer::cuda::kernels
