// The compute backend: it owns tensor memory (host or device), makes the per-layer kernels, and runs
// every other op a training step needs (element-wise, copies, dropout, normalisation statistics,
// losses, optimizer updates, the loss guard's checks), so layers, models and the training loop
// never touch tensor memory themselves and run unchanged on the CPU and on a GPU.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <memory_resource>
#include <string>
#include <vector>

#include "trainer/kernels.hpp"
#include "trainer/losses.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer {

// ---- Parameters of the ops ----

// An N-d box inside a plain tensor: per dimension (all of them, batch and channels included) the
// first index and the extent. Box::whole(shape) covers a whole tensor, e.g. a contiguous buffer.
struct Box {
  std::vector<std::int64_t> start, extent;
  static Box whole(const Shape& shape);
  std::int64_t numel() const;
  std::string to_string() const;  // "[0:2, 3:5, ...]" (start:end per dimension)
};

enum class CopyMode {
  Overwrite,   // dst[box] = src[box]
  Accumulate,  // dst[box] += src[box] (the reverse halo exchange adds halo gradients to their owner)
};

// Where a tensor's elements sit in a larger logical tensor: local element (i0, i1, ...) is element
// (i0 + offset[0], i1 + offset[1], ...) of a tensor of shape `global` (a spatial slab of a sample
// batch). Empty (the default) = the tensor is the whole.
struct GlobalPlacement {
  Shape global;
  std::vector<std::int64_t> offset;
  bool empty() const { return global.dims.empty(); }
};

// Inverted dropout: an element is dropped when the first Philox word of
// random_block(seed, step, global element index) is below probability_threshold(p)
// (fanstore/random.hpp); kept elements are scaled by 1 / (1 - p). The mask is a pure function of
// (seed, step, global index), so backward recomputes it, every device draws it alike, and a
// spatially split run (placement set) draws exactly the serial run's mask.
struct DropoutMask {
  float p = 0.f;
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  GlobalPlacement placement;
};

// Which elements share normalisation statistics.
enum class NormGroups {
  PerChannel,        // batch norm: group c = every (n, spatial) of channel c; G = C groups
  PerSampleChannel,  // instance norm: group (n, c) = the spatial extent of one plane; G = N * C
};

struct SgdUpdate {
  float lr = 0.f, momentum = 0.f, weight_decay = 0.f;
  bool nesterov = false;
};
struct LarsUpdate {
  float lr = 0.f, momentum = 0.f, weight_decay = 0.f, eta = 0.001f;
};
struct AdamUpdate {
  float lr = 0.f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, weight_decay = 0.f;
  std::uint64_t step = 1;  // 1-based (bias correction)
};
// One parameter tensor inside the arena, for LARS's per-tensor trust ratio.
struct ParameterSegment {
  std::size_t offset = 0, count = 0;
  bool lars_excluded = false;  // BN/IN scales and shifts and biases: no trust ratio, no decay
};

// One backend per process (one engine/stream, or one GPU and its stream). Every op checks that its
// tensors are on this backend's device and says which op and which shapes when they do not fit.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // One line for logs and --benchmark: "cpu-onednn, 2 threads", "cuda: NVIDIA H100 80GB HBM3 (sm_90)".
  virtual std::string describe() const = 0;
  virtual Device device() const = 0;

  // ---- Memory ----
  // `bytes` of zero-filled memory on this backend's device.
  virtual std::shared_ptr<Storage> allocate(std::size_t bytes) = 0;
  // Copies between host memory and this backend's memory (either side may be the host).
  virtual void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) = 0;
  // Waits for queued work (a no-op on the in-order CPU stream; the GPU stream otherwise). Timing
  // code calls it before reading the clock.
  virtual void synchronize() = 0;
  // True when no queued work is left: always on the CPU, a GPU stream that has run dry. The training
  // loop asks while it waits for a batch, to count only the time the device sat idle as input stall.
  virtual bool idle() { return true; }

  // ---- Input batches ----
  // Host memory for the batches the training loop uploads: page-locked on a GPU (the upload is then a
  // DMA that runs beside the kernels; freed blocks are kept for the next batches), ordinary on the
  // CPU. Thread-safe (the prefetch threads allocate); it lives as long as the backend.
  virtual std::pmr::memory_resource* input_memory() { return std::pmr::new_delete_resource(); }
  // The plain host tensor `t` on this device (t itself on the CPU). On a GPU the copy runs on a stream
  // of its own and the work queued after this call waits for it, not the work queued before: called
  // once a step's kernels are queued, it overlaps them. t's memory must stay as it is until the next
  // synchronize() returns.
  virtual Tensor upload(const Tensor& t) { return to_device(t); }

  Tensor zeros(const Shape& shape, DType dtype = DType::F32);
  // Same shape, dtype and layout as t, zero-filled, on this device.
  Tensor zeros_like(const Tensor& t);
  Tensor clone(const Tensor& t);
  // dst = src element for element (same shape, dtype and layout; either may be on the host).
  void copy(const Tensor& src, Tensor& dst);
  // A plain host copy (t itself when it already is one): what metrics, checkpoints and tests read.
  Tensor to_host(const Tensor& t);
  // A plain copy of a host tensor on this device (t itself when it is already there).
  Tensor to_device(const Tensor& t);

  // ---- Element types (mixed precision) ----
  // The type activations have between layers (F32, or BF16/F16 on a GPU with mixed precision).
  // Parameters, their gradients and optimizer state are always F32; Model casts at its boundaries.
  virtual DType activation_dtype() const { return DType::F32; }
  // t with its elements converted to `to` (t itself when it already has that type).
  virtual Tensor cast(const Tensor& t, DType to) = 0;

  // ---- Layouts ----
  // Plain (row-major) copy of t on this device, or t itself when it is already plain.
  virtual Tensor to_plain(const Tensor& t) = 0;
  // t converted to the layout of `like` (same shape), or t itself when they already agree.
  virtual Tensor to_layout_of(const Tensor& t, const Tensor& like) = 0;

  // ---- Kernels (one per layer, caching their primitives) ----
  virtual std::unique_ptr<ConvolutionKernel> make_convolution(const ConvolutionSpec& spec) = 0;
  virtual std::unique_ptr<PoolingKernel> make_pooling(const PoolingSpec& spec) = 0;
  virtual std::unique_ptr<BatchNormKernel> make_batch_norm(float epsilon) = 0;
  virtual std::unique_ptr<EltwiseKernel> make_eltwise(const EltwiseSpec& spec) = 0;
  virtual std::unique_ptr<InnerProductKernel> make_inner_product(bool bias) = 0;

  // ---- Element-wise ----
  // y = a * x + b * y over every stored element (same shape, dtype and layout); b == 0 does not read y.
  virtual void axpby(float a, const Tensor& x, float b, Tensor& y) = 0;
  virtual void fill(Tensor& t, float value) = 0;
  // True when no element is NaN or Inf (the loss guard's weight check).
  virtual bool all_finite(const Tensor& t) = 0;
  // Sum of same-shape tensors, in the layout of xs[0] (others are converted to it first).
  Tensor add(const std::vector<Tensor>& xs);
  void scale(Tensor& t, float factor) { axpby(factor, t, 0.f, t); }

  // ---- Copies of boxes (halo faces, concatenation) ----
  // dst[dst_box] = (or +=) src[src_box]; plain tensors of the same dtype; boxes of equal extents,
  // one entry per dimension, inside their tensors. Pack a face into a contiguous buffer with
  // dst_box = Box::whole(buffer.shape()), unpack it the other way round.
  virtual void copy_box(const Tensor& src, const Box& src_box, Tensor& dst, const Box& dst_box, CopyMode mode) = 0;
  // torch.cat(xs, dim=1) of plain copies; and its inverse (split dy by the inputs' channel counts).
  Tensor concat_channels(const std::vector<Tensor>& xs);
  std::vector<Tensor> split_channels(const Tensor& x, const std::vector<std::int64_t>& channels);

  // ---- Dropout ----
  // x * mask (plain, F32): the forward pass, and with dy the backward pass (same mask).
  virtual Tensor dropout(const Tensor& x, const DropoutMask& mask) = 0;

  // ---- Normalisation (instance norm; batch norm across a spatial split) ----
  // x plain (N, C, *S). Each op works on this tensor's elements only; a spatially split layer sums
  // the (G, 2) F64 results over its group between the steps and passes the global `count`
  // (elements per group) to the next one.
  // Per group: [sum x, sum x^2].
  virtual Tensor norm_sums(const Tensor& x, NormGroups groups) = 0;
  // y = gamma[c] * (x - mean_g) / sqrt(var_g + eps) + beta[c], biased variance from the sums.
  virtual Tensor norm_apply(const Tensor& x, const Tensor& sums, double count, const Tensor& gamma, const Tensor& beta,
                            float epsilon, NormGroups groups) = 0;
  // Per group: [sum dy, sum dy * x_hat].
  virtual Tensor norm_backward_sums(const Tensor& dy, const Tensor& x, const Tensor& sums, double count, float epsilon,
                                    NormGroups groups) = 0;
  // dx = gamma * inv_std * (dy - sum_dy / count - x_hat * sum_dy_xhat / count); overwrites
  // dgamma[c] and dbeta[c] (C) with the backward sums added over the groups of channel c.
  virtual Tensor norm_backward_apply(const Tensor& dy, const Tensor& x, const Tensor& sums, const Tensor& backward_sums,
                                     double count, const Tensor& gamma, float epsilon, NormGroups groups,
                                     Tensor& dgamma, Tensor& dbeta) = 0;

  // ---- Losses (losses.hpp has the definitions) ----
  // Output on this device, any layout; labels/targets on the host (uploaded by the op). The loss
  // value comes back to the host (the one scalar a step reads); the gradient stays on the device.
  virtual LossResult softmax_cross_entropy(const Tensor& logits, const std::vector<std::int32_t>& labels,
                                           float label_smoothing) = 0;
  virtual LossResult mean_squared_error(const Tensor& prediction, const std::vector<float>& target) = 0;
  virtual LossResult dice_loss(const Tensor& logits, const std::vector<std::int32_t>& labels,
                               bool include_background) = 0;
  virtual LossResult dice_cross_entropy(const Tensor& logits, const std::vector<std::int32_t>& labels,
                                        bool include_background) = 0;
  // Dice across a spatial split (losses.hpp): per (sample, class) [sum p*t, sum p, sum t] of these
  // logits as an (N*K, 3) F64 tensor on this device; the split layer sums it over its group, then
  // dice_loss_from_sums gives the volume's loss (host) and this slab's gradient (device).
  virtual Tensor dice_sums(const Tensor& logits, const std::vector<std::int32_t>& labels) = 0;
  virtual LossResult dice_loss_from_sums(const Tensor& logits, const std::vector<std::int32_t>& labels,
                                         const Tensor& sums, bool include_background) = 0;

  // ---- Optimizer updates over the flat arenas (optim.hpp has the formulas) ----
  virtual void sgd_update(Tensor& weights, const Tensor& gradients, Tensor& momentum, const SgdUpdate& update) = 0;
  virtual void lars_update(Tensor& weights, const Tensor& gradients, Tensor& momentum,
                           const std::vector<ParameterSegment>& segments, const LarsUpdate& update) = 0;
  virtual void adam_update(Tensor& weights, const Tensor& gradients, Tensor& first, Tensor& second,
                           const AdamUpdate& update) = 0;

 protected:
  // Throws std::invalid_argument "OP: TENSOR is on DEVICE, this backend computes on DEVICE".
  void require_device(const Tensor& t, const char* op, const char* what) const;
  // Optimizer arenas: on this device, F32, all of the first one's size; segments inside them.
  void require_arenas(const char* op, std::initializer_list<const Tensor*> arenas) const;
  void require_segments(const char* op, const Tensor& arena, const std::vector<ParameterSegment>& segments) const;
};

struct CpuBackendOptions {
  // OpenMP threads oneDNN may use; 0 keeps the runtime's default (OMP_NUM_THREADS).
  int threads = 0;
};

std::shared_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

}  // namespace fanstore::trainer
