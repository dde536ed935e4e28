// Losses on the GPU with the CPU backend's definitions (losses.hpp): softmax cross-entropy with
// label smoothing, MSE and MLPerf's Dice, in double, the loss summed in a fixed order.
#include <cmath>

#include "cuda/cuda_kernels.hpp"
#include "cuda/device_common.cuh"

namespace fanstore::trainer::cuda::kernels {
namespace {

// logits (N, K, S): class k of position (n, i).
struct ClassIndex {
  std::int64_t k, s;
  __device__ std::int64_t at(std::int64_t n, std::int64_t cls, std::int64_t i) const { return (n * k + cls) * s + i; }
};

__global__ void copy_loss(const double* sums, double* loss) { *loss = sums[0]; }

// p (N, K, S) = softmax over K of the logits, in double.
__global__ void softmax_kernel(const float* logits, double* p, std::int64_t positions, ClassIndex ci) {
  FS_GRID_STRIDE(pos, positions) {
    const std::int64_t n = pos / ci.s, i = pos % ci.s;
    double mx = -INFINITY, sum = 0;
    for (std::int64_t c = 0; c < ci.k; ++c) mx = fmax(mx, static_cast<double>(logits[ci.at(n, c, i)]));
    for (std::int64_t c = 0; c < ci.k; ++c) sum += (p[ci.at(n, c, i)] = exp(logits[ci.at(n, c, i)] - mx));
    for (std::int64_t c = 0; c < ci.k; ++c) p[ci.at(n, c, i)] /= sum;
  }
}

// Dice from the per (n, k) sums [sum p t, sum p, sum t]: the mean of 1 - dice over the counted classes.
__global__ void dice_loss_kernel(const double* sums, std::int64_t n, std::int64_t k, std::int64_t first, double* loss) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const double terms = static_cast<double>(n * (k - first));
  double l = 0;
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t c = first; c < k; ++c) {
      const double* s = sums + 3 * (b * k + c);
      const double num = 2 * s[0] + 1e-6, den = s[1] + s[2] + 1e-6;
      l += (1.0 - num / den) / terms;
    }
  *loss = l;
}

__global__ void dice_gradient_kernel(const double* p, const std::int32_t* labels, const double* sums, float* gradient,
                                     std::int64_t positions, std::int64_t n_classes, std::int64_t first, double terms,
                                     ClassIndex ci) {
  FS_GRID_STRIDE(pos, positions) {
    const std::int64_t n = pos / ci.s, i = pos % ci.s;
    const std::int32_t y = labels[pos];
    // dLoss/dp_k, then back through the softmax: dz_k = p_k (dp_k - sum_j p_j dp_j).
    auto dloss_dp = [&](std::int64_t c) {
      if (c < first) return 0.0;
      const double* s = sums + 3 * (n * n_classes + c);
      const double num = 2 * s[0] + 1e-6, den = s[1] + s[2] + 1e-6;
      const double t = y == c ? 1.0 : 0.0;
      return -(2 * t * den - num) / (den * den) / terms;
    };
    double dot = 0;
    for (std::int64_t c = first; c < n_classes; ++c) dot += p[ci.at(n, c, i)] * dloss_dp(c);
    for (std::int64_t c = 0; c < n_classes; ++c) {
      const double pk = p[ci.at(n, c, i)];
      gradient[ci.at(n, c, i)] = static_cast<float>(pk * (dloss_dp(c) - dot));
    }
  }
}

// sums3[g * 3 + j] from a Sum2 pair of reductions: [p t, p] and [t, -].
__global__ void interleave_sums(const double* pt_p, const double* t, double* sums3, std::int64_t groups) {
  FS_GRID_STRIDE(g, groups) {
    sums3[3 * g] = pt_p[2 * g];
    sums3[3 * g + 1] = pt_p[2 * g + 1];
    sums3[3 * g + 2] = t[2 * g];
  }
}

double* softmax_probabilities(const float* logits, std::int64_t n, std::int64_t k, std::int64_t s,
                              cudaStream_t stream) {
  double* p = nullptr;
  FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p), sizeof(double) * static_cast<std::size_t>(n * k * s), stream));
  softmax_kernel<<<blocks_for(n * s), kThreads, 0, stream>>>(logits, p, n * s, ClassIndex{k, s});
  check_launch("softmax_kernel");
  return p;
}

}  // namespace

void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float smoothing, float* gradient,
                           double* loss, std::int64_t n, std::int64_t k, std::int64_t s, cudaStream_t stream) {
  const ClassIndex ci{k, s};
  const double count = static_cast<double>(n * s), sm = smoothing;
  double* sums = nullptr;
  FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&sums), 2 * sizeof(double), stream));
  // One position per reduction element: the softmax, its loss term and its gradient.
  reduce_groups(
      [=] __device__(std::int64_t, std::int64_t pos) {
        const std::int64_t b = pos / ci.s, i = pos % ci.s;
        const std::int32_t y = labels[pos];
        double mx = -INFINITY, sum = 0;
        for (std::int64_t c = 0; c < ci.k; ++c) mx = fmax(mx, static_cast<double>(logits[ci.at(b, c, i)]));
        for (std::int64_t c = 0; c < ci.k; ++c) sum += exp(logits[ci.at(b, c, i)] - mx);
        double l = 0;
        for (std::int64_t c = 0; c < ci.k; ++c) {
          const double p = exp(logits[ci.at(b, c, i)] - mx) / sum;
          const double q = (c == y ? 1.0 - sm : 0.0) + sm / static_cast<double>(ci.k);
          l -= q * log(fmax(p, 1e-300));
          gradient[ci.at(b, c, i)] = static_cast<float>((p - q) / count);
        }
        return Sum2{l, 0.0};
      },
      1, n * s, sums, stream);
  copy_loss<<<1, 1, 0, stream>>>(sums, loss);
  check_launch("copy_loss");
  FS_CHECK(cudaFreeAsync(sums, stream));
}

void mean_squared_error(const float* prediction, const float* target, float* gradient, double* loss, std::int64_t count,
                        cudaStream_t stream) {
  double* sums = nullptr;
  FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&sums), 2 * sizeof(double), stream));
  const double c = static_cast<double>(count);
  reduce_groups(
      [=] __device__(std::int64_t, std::int64_t i) {
        const double d = static_cast<double>(prediction[i]) - target[i];
        gradient[i] = static_cast<float>(2.0 * d / c);
        return Sum2{d * d, 0.0};
      },
      1, count, sums, stream);
  copy_loss<<<1, 1, 0, stream>>>(sums, loss);
  check_launch("copy_loss");
  FS_CHECK(cudaFreeAsync(sums, stream));
}

void dice_sums(const float* logits, const std::int32_t* labels, double* sums, std::int64_t n, std::int64_t k,
               std::int64_t s, cudaStream_t stream) {
  const ClassIndex ci{k, s};
  double* p = softmax_probabilities(logits, n, k, s, stream);
  double *pt_p = nullptr, *t = nullptr;
  FS_CHECK(
      cudaMallocAsync(reinterpret_cast<void**>(&pt_p), sizeof(double) * 2 * static_cast<std::size_t>(n * k), stream));
  FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&t), sizeof(double) * 2 * static_cast<std::size_t>(n * k), stream));
  // Group g = (sample, class); element i = voxel.
  reduce_groups(
      [=] __device__(std::int64_t g, std::int64_t i) {
        const std::int64_t b = g / ci.k, c = g % ci.k;
        const double pk = p[ci.at(b, c, i)], tk = labels[b * ci.s + i] == c ? 1.0 : 0.0;
        return Sum2{pk * tk, pk};
      },
      n * k, s, pt_p, stream);
  reduce_groups(
      [=] __device__(std::int64_t g, std::int64_t i) {
        const std::int64_t b = g / ci.k, c = g % ci.k;
        return Sum2{labels[b * ci.s + i] == c ? 1.0 : 0.0, 0.0};
      },
      n * k, s, t, stream);
  interleave_sums<<<blocks_for(n * k), kThreads, 0, stream>>>(pt_p, t, sums, n * k);
  check_launch("interleave_sums");
  FS_CHECK(cudaFreeAsync(t, stream));
  FS_CHECK(cudaFreeAsync(pt_p, stream));
  FS_CHECK(cudaFreeAsync(p, stream));
}

void dice_from_sums(const float* logits, const std::int32_t* labels, const double* sums, bool include_background,
                    float* gradient, double* loss, std::int64_t n, std::int64_t k, std::int64_t s,
                    cudaStream_t stream) {
  const std::int64_t first = include_background ? 0 : 1;
  double* p = softmax_probabilities(logits, n, k, s, stream);
  dice_loss_kernel<<<1, 1, 0, stream>>>(sums, n, k, first, loss);
  check_launch("dice_loss_kernel");
  dice_gradient_kernel<<<blocks_for(n * s), kThreads, 0, stream>>>(
      p, labels, sums, gradient, n * s, k, first, static_cast<double>(n * (k - first)), ClassIndex{k, s});
  check_launch("dice_gradient_kernel");
  FS_CHECK(cudaFreeAsync(p, stream));
}

}  // namespace fanstore::trainer::cuda::kernels
