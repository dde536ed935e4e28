// The per-layer kernel interfaces of a backend (convolution, pooling, batch norm, eltwise, inner
// product) and the specs that configure them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/tensor.hpp"

namespace fanstore::trainer {

enum class Mode { Train, Eval };

// Convolution or transposed convolution, 2D or 3D (spatial rank = kernel.size()).
// Padding is per side: padding_lo zeros before the first element of each spatial dimension,
// padding_hi after the last (PyTorch's `padding=p` is lo = hi = p). Spatially split layers pad
// only where their slab meets the global boundary, hence the two sides.
struct ConvolutionSpec {
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  std::vector<std::int64_t> kernel;      // (kH, kW) or (kD, kH, kW)
  std::vector<std::int64_t> stride;      // same rank as kernel
  std::vector<std::int64_t> padding_lo;  // same rank; for a transposed convolution: cropped off the output
  std::vector<std::int64_t> padding_hi;
  std::vector<std::int64_t> dilation;  // 1 = dense (PyTorch semantics, not oneDNN's d-1)
  bool bias = true;
  bool transposed = false;  // ConvTranspose: weight is (Cin, Cout, k...) as in PyTorch

  int spatial_rank() const { return static_cast<int>(kernel.size()); }
  // Throws std::invalid_argument (naming `who`) unless every vector has the kernel's rank 2 or 3,
  // strides and dilations are >= 1 and paddings >= 0.
  void validate(const std::string& who) const;
  // Output extent along spatial dimension i for an input extent n (floor mode); may be < 1 when
  // the input is too small.
  std::int64_t output_extent(int i, std::int64_t n) const;
  // (N, Cout, out...) for an input (N, Cin, in...); throws when the input does not fit.
  Shape output_shape(const Shape& input, const std::string& who) const;
};

enum class PoolingKind { Max, Average /* count_include_pad=True, PyTorch's default */ };

struct PoolingSpec {
  PoolingKind kind = PoolingKind::Max;
  std::vector<std::int64_t> kernel;
  std::vector<std::int64_t> stride;
  std::vector<std::int64_t> padding_lo;  // per side, as ConvolutionSpec
  std::vector<std::int64_t> padding_hi;

  int spatial_rank() const { return static_cast<int>(kernel.size()); }
  void validate(const std::string& who) const;
  std::int64_t output_extent(int i, std::int64_t n) const;  // floor mode
  Shape output_shape(const Shape& input, const std::string& who) const;
};

enum class EltwiseKind { ReLU, LeakyReLU, Tanh, Scale };

struct EltwiseSpec {
  EltwiseKind kind = EltwiseKind::ReLU;
  float alpha = 0.f;  // LeakyReLU: negative slope (>= 0); Scale: the factor
};

// Kernels are created once per layer and cache their backend primitives (oneDNN primitives, cuDNN
// algorithms and workspaces) per input shape/layout: calling them again with the same input layout
// only executes. Inputs may be in any layout the backend produced; outputs come in the backend's
// preferred layout (not necessarily plain). Parameters (weights, biases, scales) and their
// gradients are always plain views into the parameter arena, so optimizers and checkpoints never
// see native layouts.

class ConvolutionKernel {
 public:
  virtual ~ConvolutionKernel() = default;
  // x: (N, Cin, *in); w: (Cout, Cin, *k) or (Cin, Cout, *k) when transposed; b: (Cout) or null. A kernel that
  // keeps its input for backward_weights keeps it in Mode::Train only, until backward_weights has run.
  virtual Tensor forward(const Tensor& x, const Tensor& w, const Tensor* b, Mode mode) = 0;
  // dy: (N, Cout, *out) -> dx: (N, Cin, *in).
  virtual Tensor backward_data(const Tensor& dy, const Tensor& w) = 0;
  // Overwrites dw (plain, shape of w) and db (Cout) if not null.
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) = 0;
};

class PoolingKernel {
 public:
  virtual ~PoolingKernel() = default;
  // Keeps what backward needs (max-pool argmax workspace) until the next forward.
  virtual Tensor forward(const Tensor& x, Mode mode) = 0;
  virtual Tensor backward(const Tensor& dy) = 0;
};

class BatchNormKernel {
 public:
  virtual ~BatchNormKernel() = default;
  // Train: normalises with batch statistics and writes them (biased variance) to mean/variance (C).
  // Eval: normalises with the given mean/variance and keeps nothing for a backward. gamma/beta: (C).
  virtual Tensor forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& mean, Tensor& variance,
                         Mode mode) = 0;
  // Uses x and the statistics of the last forward, which must be Train (else throws std::logic_error);
  // overwrites dgamma and dbeta.
  virtual Tensor backward(const Tensor& dy, const Tensor& gamma, Tensor& dgamma, Tensor& dbeta) = 0;
};

class EltwiseKernel {
 public:
  virtual ~EltwiseKernel() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  // dx from dy and the forward's output y, which determines the derivative of every kind (ReLU and
  // LeakyReLU with a non-negative slope keep the sign, tanh' = 1 - y^2, scale's is constant): a layer
  // keeps its output, which the next layer keeps anyway, and its input can go after the forward. dx is
  // written over dy when dy is its storage's sole owner (the caller moved it in).
  virtual Tensor backward(Tensor dy, const Tensor& y) = 0;
};

class InnerProductKernel {
 public:
  virtual ~InnerProductKernel() = default;
  // x: (N, Cin); w: (Cout, Cin); b: (Cout) or null -> y: (N, Cout). Keeps what it keeps as a convolution does.
  virtual Tensor forward(const Tensor& x, const Tensor& w, const Tensor* b, Mode mode) = 0;
  virtual Tensor backward_data(const Tensor& dy, const Tensor& w) = 0;
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) = 0;
};

}  // namespace fanstore::trainer
