// The compute backend interface: per-layer kernels for the heavy ops, plus layout conversion.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/tensor.hpp"

namespace fanstore::trainer {

enum class Mode { Train, Eval };

// Convolution or transposed convolution, 2D or 3D (spatial rank = kernel.size()).
struct ConvolutionSpec {
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  std::vector<std::int64_t> kernel;    // (kH, kW) or (kD, kH, kW)
  std::vector<std::int64_t> stride;    // same rank as kernel
  std::vector<std::int64_t> padding;   // symmetric, PyTorch semantics
  std::vector<std::int64_t> dilation;  // 1 = dense (PyTorch semantics, not oneDNN's d-1)
  bool bias = true;
  bool transposed = false;             // ConvTranspose: weight is (Cin, Cout, k...) as in PyTorch
};

enum class PoolingKind { Max, Average /* count_include_pad=True, PyTorch's default */ };

struct PoolingSpec {
  PoolingKind kind = PoolingKind::Max;
  std::vector<std::int64_t> kernel;
  std::vector<std::int64_t> stride;
  std::vector<std::int64_t> padding;
};

enum class EltwiseKind { ReLU, LeakyReLU, Tanh, Scale };

struct EltwiseSpec {
  EltwiseKind kind = EltwiseKind::ReLU;
  float alpha = 0.f;  // LeakyReLU: negative slope; Scale: the factor
};

// Kernels are created once per layer and cache their backend primitives per input shape/layout:
// calling them again with the same input layout only executes. Inputs may be in any layout the
// backend produced; outputs come in the backend's preferred layout (not necessarily plain).
// Parameters (weights, biases, scales) and their gradients are always plain views into the
// parameter arena, so optimizers and checkpoints never see native layouts.

class ConvolutionKernel {
 public:
  virtual ~ConvolutionKernel() = default;
  // x: (N, Cin, *in); w: (Cout, Cin, *k) or (Cin, Cout, *k) when transposed; b: (Cout) or null.
  virtual Tensor forward(const Tensor& x, const Tensor& w, const Tensor* b) = 0;
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
  // Eval: normalises with the given mean/variance. gamma/beta: (C).
  virtual Tensor forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& mean,
                         Tensor& variance, Mode mode) = 0;
  // Uses x, mean and variance from the last forward; overwrites dgamma and dbeta.
  virtual Tensor backward(const Tensor& dy, const Tensor& gamma, Tensor& dgamma, Tensor& dbeta) = 0;
};

class EltwiseKernel {
 public:
  virtual ~EltwiseKernel() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  // dx from dy and the forward's input x.
  virtual Tensor backward(const Tensor& dy, const Tensor& x) = 0;
};

class InnerProductKernel {
 public:
  virtual ~InnerProductKernel() = default;
  // x: (N, Cin); w: (Cout, Cin); b: (Cout) or null -> y: (N, Cout).
  virtual Tensor forward(const Tensor& x, const Tensor& w, const Tensor* b) = 0;
  virtual Tensor backward_data(const Tensor& dy, const Tensor& w) = 0;
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) = 0;
};

// One backend per process (one engine, one stream). The CPU backend runs on oneDNN; the CUDA one
// (later) implements the same factories on cuDNN/cuBLAS.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Plain (row-major) copy of t, or t itself when it is already plain.
  virtual Tensor to_plain(const Tensor& t) = 0;
  // t converted to the layout of `like` (same shape), or t itself when they already agree.
  virtual Tensor to_layout_of(const Tensor& t, const Tensor& like) = 0;
  // Waits for queued work (a no-op for the in-order CPU stream).
  virtual void synchronize() = 0;

  virtual std::unique_ptr<ConvolutionKernel> make_convolution(const ConvolutionSpec& spec) = 0;
  virtual std::unique_ptr<PoolingKernel> make_pooling(const PoolingSpec& spec) = 0;
  virtual std::unique_ptr<BatchNormKernel> make_batch_norm(float epsilon) = 0;
  virtual std::unique_ptr<EltwiseKernel> make_eltwise(const EltwiseSpec& spec) = 0;
  virtual std::unique_ptr<InnerProductKernel> make_inner_product(bool bias) = 0;
};

struct CpuBackendOptions {
  // OpenMP threads oneDNN may use; 0 keeps the runtime's default (OMP_NUM_THREADS).
  int threads = 0;
};

std::shared_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

}  // namespace fanstore::trainer
