// Normalisation statistics on the GPU (instance norm; batch norm across a spatial split): the same
// four ops and the same double sums as the CPU backend, reduced in a fixed order.
#include "cuda/cuda_kernels.hpp"
#include "cuda/device_common.cuh"

namespace fanstore::trainer::cuda::kernels {
namespace {

// x (N, C, S) plain: element i of group g, for per-channel groups (g = c, i over (n, s)) or
// per-plane groups (g = n * C + c, i over s).
struct GroupIndex {
  std::int64_t c, s;
  bool per_channel;
  __device__ std::int64_t at(std::int64_t g, std::int64_t i) const {
    if (!per_channel) return g * s + i;
    return ((i / s) * c + g) * s + i % s;
  }
  // The group of element e of the tensor.
  __device__ std::int64_t group_of(std::int64_t e) const {
    const std::int64_t plane = e / s;
    return per_channel ? plane % c : plane;
  }
};

// sums (G, 2) -> moments (G, 2): mean and 1 / sqrt(biased variance + eps).
__global__ void moments_kernel(const double* sums, double count, float eps, double* moments, std::int64_t groups) {
  FS_GRID_STRIDE(g, groups) {
    const double mean = sums[2 * g] / count;
    double var = sums[2 * g + 1] / count - mean * mean;
    if (var < 0) var = 0;
    moments[2 * g] = mean;
    moments[2 * g + 1] = 1.0 / sqrt(var + eps);
  }
}

__global__ void apply_kernel(const float* x, const double* m, const float* gamma, const float* beta, float* y,
                             std::int64_t total, std::int64_t c, GroupIndex gi) {
  FS_GRID_STRIDE(e, total) {
    const std::int64_t g = gi.group_of(e), ch = (e / gi.s) % c;
    y[e] = static_cast<float>(gamma[ch] * ((x[e] - m[2 * g]) * m[2 * g + 1]) + beta[ch]);
  }
}

__global__ void backward_apply_kernel(const float* dy, const float* x, const double* m, const double* bs, double count,
                                      const float* gamma, float* dx, std::int64_t total, std::int64_t c,
                                      GroupIndex gi) {
  FS_GRID_STRIDE(e, total) {
    const std::int64_t g = gi.group_of(e), ch = (e / gi.s) % c;
    const double inv = m[2 * g + 1], x_hat = (x[e] - m[2 * g]) * inv;
    dx[e] = static_cast<float>(gamma[ch] * inv * (dy[e] - bs[2 * g] / count - x_hat * bs[2 * g + 1] / count));
  }
}

// dgamma[c] / dbeta[c]: the backward sums of channel c's groups, added in group order.
__global__ void parameter_gradients_kernel(const double* bs, float* dgamma, float* dbeta, std::int64_t n,
                                           std::int64_t c, bool per_channel) {
  FS_GRID_STRIDE(ch, c) {
    double dg = 0, db = 0;
    const std::int64_t groups = per_channel ? 1 : n;
    for (std::int64_t b = 0; b < groups; ++b) {
      const std::int64_t g = per_channel ? ch : b * c + ch;
      db += bs[2 * g];
      dg += bs[2 * g + 1];
    }
    dgamma[ch] = static_cast<float>(dg);
    dbeta[ch] = static_cast<float>(db);
  }
}

std::int64_t group_count(std::int64_t n, std::int64_t c, bool per_channel) { return per_channel ? c : n * c; }

// Moments of the groups in a stream-ordered scratch buffer the caller frees.
double* moments(const double* sums, double count, float eps, std::int64_t groups, cudaStream_t stream) {
  double* m = nullptr;
  FS_CHECK(
      cudaMallocAsync(reinterpret_cast<void**>(&m), sizeof(double) * 2 * static_cast<std::size_t>(groups), stream));
  moments_kernel<<<blocks_for(groups), kThreads, 0, stream>>>(sums, count, eps, m, groups);
  check_launch("moments_kernel");
  return m;
}

}  // namespace

void norm_sums(const float* x, double* sums, std::int64_t n, std::int64_t c, std::int64_t s, bool per_channel,
               cudaStream_t stream) {
  const GroupIndex gi{c, s, per_channel};
  reduce_groups(
      [=] __device__(std::int64_t g, std::int64_t i) {
        const double v = x[gi.at(g, i)];
        return Sum2{v, v * v};
      },
      group_count(n, c, per_channel), per_channel ? n * s : s, sums, stream);
}

void norm_apply(const float* x, const double* sums, double count, const float* gamma, const float* beta, float epsilon,
                float* y, std::int64_t n, std::int64_t c, std::int64_t s, bool per_channel, cudaStream_t stream) {
  double* m = moments(sums, count, epsilon, group_count(n, c, per_channel), stream);
  apply_kernel<<<blocks_for(n * c * s), kThreads, 0, stream>>>(x, m, gamma, beta, y, n * c * s, c,
                                                               GroupIndex{c, s, per_channel});
  check_launch("apply_kernel");
  FS_CHECK(cudaFreeAsync(m, stream));
}

void norm_backward_sums(const float* dy, const float* x, const double* sums, double count, float epsilon, double* out,
                        std::int64_t n, std::int64_t c, std::int64_t s, bool per_channel, cudaStream_t stream) {
  const std::int64_t groups = group_count(n, c, per_channel);
  const double* m = moments(sums, count, epsilon, groups, stream);
  const GroupIndex gi{c, s, per_channel};
  reduce_groups(
      [=] __device__(std::int64_t g, std::int64_t i) {
        const std::int64_t at = gi.at(g, i);
        const double d = dy[at];
        return Sum2{d, d * ((x[at] - m[2 * g]) * m[2 * g + 1])};
      },
      groups, per_channel ? n * s : s, out, stream);
  FS_CHECK(cudaFreeAsync(const_cast<double*>(m), stream));
}

void norm_backward_apply(const float* dy, const float* x, const double* sums, const double* backward_sums, double count,
                         const float* gamma, float epsilon, float* dx, float* dgamma, float* dbeta, std::int64_t n,
                         std::int64_t c, std::int64_t s, bool per_channel, cudaStream_t stream) {
  double* m = moments(sums, count, epsilon, group_count(n, c, per_channel), stream);
  backward_apply_kernel<<<blocks_for(n * c * s), kThreads, 0, stream>>>(dy, x, m, backward_sums, count, gamma, dx,
                                                                        n * c * s, c, GroupIndex{c, s, per_channel});
  check_launch("backward_apply_kernel");
  parameter_gradients_kernel<<<blocks_for(c), kThreads, 0, stream>>>(backward_sums, dgamma, dbeta, n, c, per_channel);
  check_launch("parameter_gradients_kernel");
  FS_CHECK(cudaFreeAsync(m, stream));
}

}  // namespace fanstore::trainer::cuda::kernels
