// The CUDA backend's element-wise kernels: axpby, fill, the finite check, casts, layout transposes,
// box copies, dropout, per-channel bias and sums, activations and batch-norm helpers.
#include <cmath>
#include <type_traits>

#include "cuda/cuda_kernels.hpp"
#include "cuda/device_common.cuh"

namespace fanstore::trainer::cuda::kernels {
namespace {

template <class T>
__global__ void axpby_kernel(float a, const T* x, float b, T* y, std::int64_t n) {
  // b == 0 must not read y (it may hold NaN from an earlier use of the buffer).
  FS_GRID_STRIDE(i, n) y[i] = from_float<T>(b == 0.f ? a * to_float(x[i]) : a * to_float(x[i]) + b * to_float(y[i]));
}

template <class T>
__global__ void fill_kernel(T* p, float v, std::int64_t n) {
  FS_GRID_STRIDE(i, n) p[i] = from_float<T>(v);
}

template <class T>
__global__ void nonfinite_kernel(const T* p, std::int64_t n, int* flag) {
  FS_GRID_STRIDE(i, n) {
    if (!isfinite(to_float(p[i]))) *flag = 1;  // a benign race: every writer writes 1
  }
}

template <class S, class D>
__global__ void cast_kernel(const S* src, D* dst, std::int64_t n) {
  FS_GRID_STRIDE(i, n) dst[i] = from_float<D>(to_float(src[i]));
}

// plain (N, C, S) index -> channels-last (N, S, C) index, and back.
template <class T>
__global__ void to_channels_last_kernel(const T* src, T* dst, std::int64_t n, std::int64_t c, std::int64_t s) {
  FS_GRID_STRIDE(i, n * c * s) {
    const std::int64_t sp = i % s, ch = (i / s) % c, b = i / (s * c);
    dst[(b * s + sp) * c + ch] = src[i];
  }
}
template <class T>
__global__ void from_channels_last_kernel(const T* src, T* dst, std::int64_t n, std::int64_t c, std::int64_t s) {
  FS_GRID_STRIDE(i, n * c * s) {
    const std::int64_t sp = i % s, ch = (i / s) % c, b = i / (s * c);
    dst[i] = src[(b * s + sp) * c + ch];
  }
}

template <class T>
__global__ void copy_rows_kernel(ops::BoxCopyPlan plan, const T* src, T* dst, bool accumulate) {
  const std::int64_t length = plan.row_length();
  FS_GRID_STRIDE(i, plan.count) {
    std::int64_t s = 0, d = 0;
    plan.row_offsets(i / length, s, d);
    const std::int64_t k = i % length;
    if constexpr (std::is_same_v<T, float>) dst[d + k] = accumulate ? dst[d + k] + src[s + k] : src[s + k];
    else dst[d + k] = src[s + k];  // halves and doubles are only moved: copy_box accumulates floats alone
  }
}

template <class T>
__global__ void dropout_kernel(const T* x, T* y, std::int64_t n, ops::PlacementIndex index, std::uint64_t seed,
                               std::uint64_t step, std::uint64_t threshold, float keep_scale) {
  FS_GRID_STRIDE(i, n) {
    const auto g = static_cast<std::uint64_t>(index.global_index(i));
    y[i] = from_float<T>(to_float(x[i]) * ops::dropout_factor(seed, step, g, threshold, keep_scale));
  }
}

__device__ __forceinline__ std::int64_t channel_of(std::int64_t i, std::int64_t c, std::int64_t s, bool channels_last) {
  return channels_last ? i % c : (i / s) % c;
}

template <class T>
__global__ void bias_kernel(T* y, const float* bias, std::int64_t total, std::int64_t c, std::int64_t s, bool cl) {
  FS_GRID_STRIDE(i, total) y[i] = from_float<T>(to_float(y[i]) + bias[channel_of(i, c, s, cl)]);
}

// Element i of channel ch's group: (batch i / s, position i % s) in either layout.
__device__ __forceinline__ std::int64_t channel_element(std::int64_t ch, std::int64_t i, std::int64_t c, std::int64_t s,
                                                        bool channels_last) {
  const std::int64_t b = i / s, sp = i % s;
  return channels_last ? (b * s + sp) * c + ch : (b * c + ch) * s + sp;
}

template <class T>
struct ChannelValue {  // [x, 0] per element of a channel
  const T* p;
  std::int64_t c, s;
  bool channels_last;
  __device__ Sum2 operator()(std::int64_t ch, std::int64_t i) const {
    return Sum2{static_cast<double>(to_float(p[channel_element(ch, i, c, s, channels_last)])), 0.0};
  }
};

__global__ void sums_to_float(const double* sums, float* out, std::int64_t c) {
  FS_GRID_STRIDE(i, c) out[i] = static_cast<float>(sums[2 * i]);
}

__device__ __forceinline__ float activate(EltwiseKind kind, float alpha, float x) {
  switch (kind) {
    case EltwiseKind::ReLU: return x > 0.f ? x : 0.f;
    case EltwiseKind::LeakyReLU: return x > 0.f ? x : alpha * x;
    case EltwiseKind::Tanh: return tanhf(x);
    case EltwiseKind::Scale: return alpha * x;
  }
  return x;
}

// d activation / dx from the output y (oneDNN's *_use_dst_for_bwd conventions: ReLU's derivative at 0 is 0;
// a non-negative slope keeps x's sign in y).
__device__ __forceinline__ float derivative(EltwiseKind kind, float alpha, float y) {
  switch (kind) {
    case EltwiseKind::ReLU: return y > 0.f ? 1.f : 0.f;
    case EltwiseKind::LeakyReLU: return y > 0.f ? 1.f : alpha;
    case EltwiseKind::Tanh: return 1.f - y * y;
    case EltwiseKind::Scale: return alpha;
  }
  return 1.f;
}

template <class T>
__global__ void eltwise_forward_kernel(EltwiseKind kind, float alpha, const T* x, T* y, std::int64_t n) {
  FS_GRID_STRIDE(i, n) y[i] = from_float<T>(activate(kind, alpha, to_float(x[i])));
}
template <class T>
__global__ void eltwise_backward_kernel(EltwiseKind kind, float alpha, const T* dy, const T* y, T* dx, std::int64_t n) {
  FS_GRID_STRIDE(i, n) dx[i] = from_float<T>(to_float(dy[i]) * derivative(kind, alpha, to_float(y[i])));
}

__global__ void variance_kernel(const float* inv, float* var, std::int64_t c, float eps) {
  FS_GRID_STRIDE(i, c) var[i] = 1.f / (inv[i] * inv[i]) - eps;
}

}  // namespace

void axpby(DType type, float a, const void* x, float b, void* y, std::int64_t n, cudaStream_t stream) {
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    axpby_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, static_cast<const T*>(x), b, static_cast<T*>(y), n);
  });
  check_launch("axpby_kernel");
}

void fill(DType type, void* data, float value, std::int64_t n, cudaStream_t stream) {
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(data), value, n);
  });
  check_launch("fill_kernel");
}

void find_nonfinite(DType type, const void* data, std::int64_t n, int* flag, cudaStream_t stream) {
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    nonfinite_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(data), n, flag);
  });
  check_launch("nonfinite_kernel");
}

void cast(DType from, const void* src, DType to, void* dst, std::int64_t n, cudaStream_t stream) {
  dispatch(from, [&](auto s) {
    dispatch(to, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
  check_launch("cast_kernel");
}

void to_channels_last(DType type, const void* src, void* dst, std::int64_t n, std::int64_t c, std::int64_t s,
                      cudaStream_t stream) {
  dispatch_moves(type, [&](auto t) {
    using T = decltype(t);
    to_channels_last_kernel<<<blocks_for(n * c * s), kThreads, 0, stream>>>(static_cast<const T*>(src),
                                                                            static_cast<T*>(dst), n, c, s);
  });
  check_launch("to_channels_last_kernel");
}

void from_channels_last(DType type, const void* src, void* dst, std::int64_t n, std::int64_t c, std::int64_t s,
                        cudaStream_t stream) {
  dispatch_moves(type, [&](auto t) {
    using T = decltype(t);
    from_channels_last_kernel<<<blocks_for(n * c * s), kThreads, 0, stream>>>(static_cast<const T*>(src),
                                                                              static_cast<T*>(dst), n, c, s);
  });
  check_launch("from_channels_last_kernel");
}

void copy_box(const ops::BoxCopyPlan& plan, std::size_t element_bytes, const void* src, void* dst, bool accumulate,
              cudaStream_t stream) {
  if (plan.count == 0) return;
  // Overwrite moves bytes (any dtype of that size); accumulate adds floats.
  auto launch = [&](auto t) {
    using T = decltype(t);
    copy_rows_kernel<<<blocks_for(plan.count), kThreads, 0, stream>>>(plan, static_cast<const T*>(src),
                                                                      static_cast<T*>(dst), accumulate);
  };
  if (accumulate || element_bytes == 4) launch(float{});
  else if (element_bytes == 2) launch(__half{});
  else if (element_bytes == 8) launch(double{});
  else throw std::invalid_argument("copy_box: unsupported element size");
  check_launch("copy_rows_kernel");
}

void dropout(DType type, const void* x, void* y, std::int64_t n, const ops::PlacementIndex& index, std::uint64_t seed,
             std::uint64_t step, std::uint64_t threshold, float keep_scale, cudaStream_t stream) {
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, index, seed,
                                                           step, threshold, keep_scale);
  });
  check_launch("dropout_kernel");
}

void add_channel_bias(DType type, void* y, const float* bias, std::int64_t n, std::int64_t c, std::int64_t s,
                      bool channels_last, cudaStream_t stream) {
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    bias_kernel<<<blocks_for(n * c * s), kThreads, 0, stream>>>(static_cast<T*>(y), bias, n * c * s, c, s,
                                                                channels_last);
  });
  check_launch("bias_kernel");
}

void channel_sums(DType type, const void* x, float* out, std::int64_t n, std::int64_t c, std::int64_t s,
                  bool channels_last, cudaStream_t stream) {
  double* sums = nullptr;
  FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&sums), sizeof(double) * 2 * static_cast<std::size_t>(c), stream));
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    reduce_groups(ChannelValue<T>{static_cast<const T*>(x), c, s, channels_last}, c, n * s, sums, stream);
  });
  sums_to_float<<<blocks_for(c), kThreads, 0, stream>>>(sums, out, c);
  check_launch("sums_to_float");
  FS_CHECK(cudaFreeAsync(sums, stream));
}

void eltwise_forward(EltwiseKind kind, float alpha, DType type, const void* x, void* y, std::int64_t n,
                     cudaStream_t stream) {
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    eltwise_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(kind, alpha, static_cast<const T*>(x),
                                                                   static_cast<T*>(y), n);
  });
  check_launch("eltwise_forward_kernel");
}

void eltwise_backward(EltwiseKind kind, float alpha, DType type, const void* dy, const void* y, void* dx,
                      std::int64_t n, cudaStream_t stream) {
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    eltwise_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(kind, alpha, static_cast<const T*>(dy),
                                                                    static_cast<const T*>(y), static_cast<T*>(dx), n);
  });
  check_launch("eltwise_backward_kernel");
}

void variance_from_inv_std(const float* inv_std, float* variance, std::int64_t c, float epsilon, cudaStream_t stream) {
  variance_kernel<<<blocks_for(c), kThreads, 0, stream>>>(inv_std, variance, c, epsilon);
  check_launch("variance_kernel");
}

}  // namespace fanstore::trainer::cuda::kernels
