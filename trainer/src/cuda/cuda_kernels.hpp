// Launchers of the CUDA backend's own kernels (the ops cuDNN and cuBLAS do not cover). Host
// functions on raw device pointers, all enqueued on the given stream; every launch is checked.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "ops/box_copy_plan.hpp"
#include "ops/dropout_mask.hpp"
#include "trainer/backend.hpp"

namespace fanstore::trainer::cuda::kernels {

// ---- element-wise (elements of `type`, arithmetic in float) ----
void axpby(DType type, float a, const void* x, float b, void* y, std::int64_t n, cudaStream_t stream);
void fill(DType type, void* data, float value, std::int64_t n, cudaStream_t stream);
// Sets *flag (device int, zeroed by the caller) to 1 when an element is NaN or Inf.
void find_nonfinite(DType type, const void* data, std::int64_t n, int* flag, cudaStream_t stream);
void cast(DType from, const void* src, DType to, void* dst, std::int64_t n, cudaStream_t stream);
// (N, C, S) plain <-> (N, S, C) channels-last, S the product of the spatial extents.
void to_channels_last(DType type, const void* src, void* dst, std::int64_t n, std::int64_t c, std::int64_t s,
                      cudaStream_t stream);
void from_channels_last(DType type, const void* src, void* dst, std::int64_t n, std::int64_t c, std::int64_t s,
                        cudaStream_t stream);
// One row per plan row; accumulate (F32 only) adds instead of copying.
void copy_box(const ops::BoxCopyPlan& plan, std::size_t element_bytes, const void* src, void* dst, bool accumulate,
              cudaStream_t stream);
void dropout(DType type, const void* x, void* y, std::int64_t n, const ops::PlacementIndex& index, std::uint64_t seed,
             std::uint64_t step, std::uint64_t threshold, float keep_scale, cudaStream_t stream);

// ---- per-channel (tensors (N, C, S) plain or (N, S, C) channels-last) ----
void add_channel_bias(DType type, void* y, const float* bias, std::int64_t n, std::int64_t c, std::int64_t s,
                      bool channels_last, cudaStream_t stream);
// out[c] = sum over n and s of x[n, c, s] (deterministic order), written as F32.
void channel_sums(DType type, const void* x, float* out, std::int64_t n, std::int64_t c, std::int64_t s,
                  bool channels_last, cudaStream_t stream);

// ---- activations ----
void eltwise_forward(EltwiseKind kind, float alpha, DType type, const void* x, void* y, std::int64_t n,
                     cudaStream_t stream);
// dx from dy and the forward's output y (EltwiseKernel::backward).
void eltwise_backward(EltwiseKind kind, float alpha, DType type, const void* dy, const void* y, void* dx,
                      std::int64_t n, cudaStream_t stream);

// ---- batch norm helper ----
// variance[c] = 1 / inv_std[c]^2 - epsilon (cuDNN saves 1/sqrt(var + eps), the layer wants var).
void variance_from_inv_std(const float* inv_std, float* variance, std::int64_t c, float epsilon, cudaStream_t stream);

// ---- normalisation statistics (plain F32 (N, C, S); sums F64 (G, 2)) ----
void norm_sums(const float* x, double* sums, std::int64_t n, std::int64_t c, std::int64_t s, bool per_channel,
               cudaStream_t stream);
void norm_apply(const float* x, const double* sums, double count, const float* gamma, const float* beta, float epsilon,
                float* y, std::int64_t n, std::int64_t c, std::int64_t s, bool per_channel, cudaStream_t stream);
void norm_backward_sums(const float* dy, const float* x, const double* sums, double count, float epsilon, double* out,
                        std::int64_t n, std::int64_t c, std::int64_t s, bool per_channel, cudaStream_t stream);
void norm_backward_apply(const float* dy, const float* x, const double* sums, const double* backward_sums, double count,
                         const float* gamma, float epsilon, float* dx, float* dgamma, float* dbeta, std::int64_t n,
                         std::int64_t c, std::int64_t s, bool per_channel, cudaStream_t stream);

// ---- losses (plain F32 logits (N, K, S); labels device int32 (N*S)); the sum lands in *loss ----
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float smoothing, float* gradient,
                           double* loss, std::int64_t n, std::int64_t k, std::int64_t s, cudaStream_t stream);
void mean_squared_error(const float* prediction, const float* target, float* gradient, double* loss, std::int64_t count,
                        cudaStream_t stream);
// Dice in two steps, so a spatial split can add the sums of its slabs in between: per (sample,
// class) [sum p t, sum p, sum t] (N*K*3 doubles), then the loss and these logits' gradient from them.
void dice_sums(const float* logits, const std::int32_t* labels, double* sums, std::int64_t n, std::int64_t k,
               std::int64_t s, cudaStream_t stream);
void dice_from_sums(const float* logits, const std::int32_t* labels, const double* sums, bool include_background,
                    float* gradient, double* loss, std::int64_t n, std::int64_t k, std::int64_t s, cudaStream_t stream);

// ---- optimizers (flat F32 arenas) ----
void sgd(float* w, const float* g, float* momentum, std::int64_t n, const SgdUpdate& u, cudaStream_t stream);
// One trust ratio per parameter tensor (segment), its norms summed in a fixed order.
void lars(float* w, const float* g, float* momentum, const std::vector<ParameterSegment>& segments, std::int64_t n,
          const LarsUpdate& u, cudaStream_t stream);
void adam(float* w, const float* g, float* m, float* v, std::int64_t n, const AdamUpdate& u, cudaStream_t stream);

}  // namespace fanstore::trainer::cuda::kernels
