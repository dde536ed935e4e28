// The CUDA backend: device memory from a stream-ordered pool, one stream, cuDNN/cuBLASLt kernels
// per layer, and our kernels for every other op (cuda_kernels.hpp).
#include "cuda/cuda_backend.hpp"

#include <cstring>
#include <stdexcept>

#include "cuda/cuda_context.hpp"
#include "cuda/cuda_kernels.hpp"
#include "cuda/cuda_layers.hpp"
#include "ops/box_copy_plan.hpp"
#include "ops/dropout_mask.hpp"

namespace fanstore::trainer::cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& o) {
    const bool half = o.precision != Precision::FP32;
    const bool channels_last = o.channels_last < 0 ? half : o.channels_last != 0;
    ctx_ = std::make_shared<CudaContext>(o.device, o.precision, channels_last, o.deterministic);
  }
  ~CudaBackend() override {
    try {
      synchronize();
    } catch (...) {  // a destructor reports nothing; the stream's error surfaced at the last sync already
    }
  }

  std::string name() const override { return "cuda-cudnn"; }
  std::string describe() const override {
    const auto& p = ctx_->properties();
    return "cuda device " + std::to_string(ctx_->device()) + ": " + p.name + " (sm_" + std::to_string(p.major) +
           std::to_string(p.minor) + ", " + std::to_string(p.totalGlobalMem >> 30) + " GiB), " +
           precision_name(ctx_->precision()) + (ctx_->channels_last() ? ", channels-last" : "");
  }
  Device device() const override { return Device::Cuda; }
  DType activation_dtype() const override { return ctx_->activation_type(); }

  std::shared_ptr<Storage> allocate(std::size_t bytes) override { return ctx_->allocate(bytes, ctx_); }

  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) override {
    if (bytes == 0) return;
    if (dst_device == Device::Host && src_device == Device::Host) {
      std::memmove(dst, src, bytes);
      return;
    }
    const cudaMemcpyKind kind = dst_device == Device::Host   ? cudaMemcpyDeviceToHost
                                : src_device == Device::Host ? cudaMemcpyHostToDevice
                                                             : cudaMemcpyDeviceToDevice;
    FS_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, ctx_->stream()));
    // The host reads what it copied out right away; a pageable host source was staged already.
    if (dst_device == Device::Host) synchronize();
  }

  void synchronize() override { FS_CHECK(cudaStreamSynchronize(ctx_->stream())); }
  bool idle() override {
    const cudaError_t status = cudaStreamQuery(ctx_->stream());
    if (status == cudaErrorNotReady) return false;
    FS_CHECK(status);
    return true;
  }

  std::pmr::memory_resource* input_memory() override { return ctx_->input_memory(); }
  Tensor upload(const Tensor& t) override {
    if (t.device() != Device::Host || !t.is_plain())
      throw std::invalid_argument("upload: needs a plain host tensor, got one in " +
                                  std::string(device_name(t.device())) + " memory");
    return ctx_->upload(t, ctx_);
  }

  Tensor cast(const Tensor& t, DType to) override {
    require_device(t, "cast", "tensor");
    if (t.dtype() == to) return t;
    Tensor out = Tensor::on_storage(allocate(t.capacity() * dtype_size(to)), t.shape(), to, t.layout());
    kernels::cast(t.dtype(), t.raw(), to, out.raw(), static_cast<std::int64_t>(t.capacity()), ctx_->stream());
    return out;
  }

  Tensor to_plain(const Tensor& t) override {
    require_device(t, "to_plain", "tensor");
    if (t.is_plain()) return t;
    if (!is_channels_last(t)) throw std::invalid_argument("to_plain: tensor in layout " + t.layout()->describe());
    Tensor out = zeros(t.shape(), t.dtype());
    const Shape& s = t.shape();
    kernels::from_channels_last(t.dtype(), t.raw(), out.raw(), s[0], s[1], s.spatial_size(), ctx_->stream());
    return out;
  }

  Tensor to_layout_of(const Tensor& t, const Tensor& like) override {
    require_device(t, "to_layout_of", "tensor");
    Tensor x = cast(t, like.dtype());
    if (x.same_layout(like)) return x;
    if (like.is_plain()) return to_plain(x);
    Tensor plain = to_plain(x);
    const Shape& s = plain.shape();
    Tensor out = Tensor::on_storage(allocate(plain.bytes()), s, plain.dtype(),
                                    std::make_shared<ChannelsLast>(static_cast<std::size_t>(s.numel())));
    kernels::to_channels_last(plain.dtype(), plain.raw(), out.raw(), s[0], s[1], s.spatial_size(), ctx_->stream());
    return out;
  }

  std::unique_ptr<ConvolutionKernel> make_convolution(const ConvolutionSpec& spec) override {
    return make_cudnn_convolution(spec, *this, ctx_);
  }
  std::unique_ptr<PoolingKernel> make_pooling(const PoolingSpec& spec) override {
    return make_cudnn_pooling(spec, *this, ctx_);
  }
  std::unique_ptr<BatchNormKernel> make_batch_norm(float epsilon) override {
    return make_cudnn_batch_norm(epsilon, *this, ctx_);
  }
  std::unique_ptr<EltwiseKernel> make_eltwise(const EltwiseSpec& spec) override {
    return make_cuda_eltwise(spec, *this, ctx_);
  }
  std::unique_ptr<InnerProductKernel> make_inner_product(bool bias) override {
    return make_cublaslt_inner_product(bias, *this, ctx_);
  }

  void axpby(float a, const Tensor& x, float b, Tensor& y) override {
    require_device(x, "axpby", "x");
    require_device(y, "axpby", "y");
    if (!x.same_layout(y))
      throw std::invalid_argument("axpby: x " + x.shape().to_string() + " and y " + y.shape().to_string() +
                                  " differ in shape, dtype or layout");
    kernels::axpby(y.dtype(), a, x.raw(), b, y.raw(), static_cast<std::int64_t>(y.capacity()), ctx_->stream());
  }

  void fill(Tensor& t, float value) override {
    require_device(t, "fill", "tensor");
    kernels::fill(t.dtype(), t.raw(), value, static_cast<std::int64_t>(t.capacity()), ctx_->stream());
  }

  bool all_finite(const Tensor& t) override {
    require_device(t, "all_finite", "tensor");
    int* flag = nullptr;
    FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&flag), sizeof(int), ctx_->stream()));
    FS_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), ctx_->stream()));
    kernels::find_nonfinite(t.dtype(), t.raw(), static_cast<std::int64_t>(t.capacity()), flag, ctx_->stream());
    int host = 0;
    copy_bytes(&host, Device::Host, flag, Device::Cuda, sizeof(int));
    FS_CHECK(cudaFreeAsync(flag, ctx_->stream()));
    return host == 0;
  }

  void copy_box(const Tensor& src, const Box& src_box, Tensor& dst, const Box& dst_box, CopyMode mode) override {
    require_device(src, "copy_box", "source");
    require_device(dst, "copy_box", "destination");
    if (!src.is_plain() || !dst.is_plain()) throw std::invalid_argument("copy_box: tensors must be plain");
    if (src.dtype() != dst.dtype()) throw std::invalid_argument("copy_box: source and destination dtypes differ");
    if (mode == CopyMode::Accumulate && src.dtype() != DType::F32)
      throw std::invalid_argument("copy_box: accumulate needs F32 tensors");
    const ops::BoxCopyPlan plan = ops::plan_box_copy(src.shape(), src_box, dst.shape(), dst_box, "copy_box");
    kernels::copy_box(plan, dtype_size(src.dtype()), src.raw(), dst.raw(), mode == CopyMode::Accumulate,
                      ctx_->stream());
  }

  Tensor dropout(const Tensor& t, const DropoutMask& mask) override {
    require_device(t, "dropout", "input");
    if (!(mask.p >= 0.f && mask.p < 1.f)) throw std::invalid_argument("dropout: probability must be in [0, 1)");
    const Tensor x = to_plain(t);
    const ops::PlacementIndex index = ops::make_placement_index(x.shape(), mask.placement, "dropout");
    Tensor y = zeros(x.shape(), x.dtype());
    kernels::dropout(x.dtype(), x.raw(), y.raw(), x.numel(), index, mask.seed, mask.step, probability_threshold(mask.p),
                     1.f / (1.f - mask.p), ctx_->stream());
    return y;
  }

  Tensor norm_sums(const Tensor& x_any, NormGroups groups) override {
    const Tensor x = plain_f32(x_any, "norm_sums");
    const Shape& s = x.shape();
    Tensor out = zeros(Shape{groups == NormGroups::PerChannel ? s[1] : s[0] * s[1], 2}, DType::F64);
    kernels::norm_sums(x.data(), static_cast<double*>(out.raw()), s[0], s[1], s.spatial_size(),
                       groups == NormGroups::PerChannel, ctx_->stream());
    return out;
  }

  Tensor norm_apply(const Tensor& x_any, const Tensor& sums, double count, const Tensor& gamma, const Tensor& beta,
                    float epsilon, NormGroups groups) override {
    const Tensor x = plain_f32(x_any, "norm_apply");
    check_sums(sums, x.shape(), groups, "norm_apply");
    Tensor y = zeros(x.shape());
    const Shape& s = x.shape();
    kernels::norm_apply(x.data(), static_cast<const double*>(sums.raw()), count, gamma.data(), beta.data(), epsilon,
                        y.data(), s[0], s[1], s.spatial_size(), groups == NormGroups::PerChannel, ctx_->stream());
    return cast(y, x_any.dtype());
  }

  Tensor norm_backward_sums(const Tensor& dy_any, const Tensor& x_any, const Tensor& sums, double count, float epsilon,
                            NormGroups groups) override {
    const Tensor x = plain_f32(x_any, "norm_backward_sums"), dy = plain_f32(dy_any, "norm_backward_sums");
    check_sums(sums, x.shape(), groups, "norm_backward_sums");
    const Shape& s = x.shape();
    Tensor out = zeros(sums.shape(), DType::F64);
    kernels::norm_backward_sums(dy.data(), x.data(), static_cast<const double*>(sums.raw()), count, epsilon,
                                static_cast<double*>(out.raw()), s[0], s[1], s.spatial_size(),
                                groups == NormGroups::PerChannel, ctx_->stream());
    return out;
  }

  Tensor norm_backward_apply(const Tensor& dy_any, const Tensor& x_any, const Tensor& sums, const Tensor& backward_sums,
                             double count, const Tensor& gamma, float epsilon, NormGroups groups, Tensor& dgamma,
                             Tensor& dbeta) override {
    const Tensor x = plain_f32(x_any, "norm_backward_apply"), dy = plain_f32(dy_any, "norm_backward_apply");
    check_sums(sums, x.shape(), groups, "norm_backward_apply");
    check_sums(backward_sums, x.shape(), groups, "norm_backward_apply");
    for (const Tensor* t : {&gamma, static_cast<const Tensor*>(&dgamma), static_cast<const Tensor*>(&dbeta)})
      require_device(*t, "norm_backward_apply", "parameter");
    Tensor dx = zeros(x.shape());
    const Shape& s = x.shape();
    kernels::norm_backward_apply(dy.data(), x.data(), static_cast<const double*>(sums.raw()),
                                 static_cast<const double*>(backward_sums.raw()), count, gamma.data(), epsilon,
                                 dx.data(), dgamma.data(), dbeta.data(), s[0], s[1], s.spatial_size(),
                                 groups == NormGroups::PerChannel, ctx_->stream());
    return cast(dx, dy_any.dtype());
  }

  LossResult softmax_cross_entropy(const Tensor& logits_any, const std::vector<std::int32_t>& labels,
                                   float label_smoothing) override {
    const Tensor logits = plain_f32(logits_any, "softmax_cross_entropy");
    const Classes c = classes_of(logits, labels, "softmax_cross_entropy");
    LossResult r{0, zeros(logits.shape())};
    DeviceScratch scratch(*this, labels);
    kernels::softmax_cross_entropy(logits.data(), scratch.labels, label_smoothing, r.gradient.data(), scratch.loss, c.n,
                                   c.k, c.s, ctx_->stream());
    r.loss = scratch.read_loss() / static_cast<double>(c.n * c.s);
    return r;
  }

  LossResult mean_squared_error(const Tensor& prediction_any, const std::vector<float>& target) override {
    const Tensor prediction = plain_f32(prediction_any, "mean_squared_error");
    if (target.size() != static_cast<std::size_t>(prediction.numel()))
      throw std::invalid_argument("mse: " + std::to_string(target.size()) +
                                  " target values for a prediction of shape " + prediction.shape().to_string());
    Tensor t = to_device(Tensor::view(prediction.shape(), const_cast<float*>(target.data())));
    LossResult r{0, zeros(prediction.shape())};
    DeviceScratch scratch(*this, {});
    kernels::mean_squared_error(prediction.data(), t.data(), r.gradient.data(), scratch.loss, prediction.numel(),
                                ctx_->stream());
    r.loss = scratch.read_loss() / static_cast<double>(prediction.numel());
    return r;
  }

  LossResult dice_loss(const Tensor& logits, const std::vector<std::int32_t>& labels,
                       bool include_background) override {
    return dice_loss_from_sums(logits, labels, dice_sums(logits, labels), include_background);
  }

  // The split form of the Dice loss (a spatial split sums these over its group): per (sample,
  // class) [sum p t, sum p, sum t] as (N*K, 3) F64.
  Tensor dice_sums(const Tensor& logits_any, const std::vector<std::int32_t>& labels) override {
    const Tensor logits = plain_f32(logits_any, "dice_sums");
    const Classes c = classes_of(logits, labels, "dice_sums");
    Tensor sums = zeros(Shape{c.n * c.k, 3}, DType::F64);
    DeviceScratch scratch(*this, labels);
    kernels::dice_sums(logits.data(), scratch.labels, static_cast<double*>(sums.raw()), c.n, c.k, c.s, ctx_->stream());
    return sums;
  }
  LossResult dice_loss_from_sums(const Tensor& logits_any, const std::vector<std::int32_t>& labels, const Tensor& sums,
                                 bool include_background) override {
    const Tensor logits = plain_f32(logits_any, "dice_loss_from_sums");
    const Classes c = classes_of(logits, labels, "dice_loss_from_sums");
    require_device(sums, "dice_loss_from_sums", "sums");
    if (sums.dtype() != DType::F64 || sums.numel() != c.n * c.k * 3)
      throw std::invalid_argument("dice_loss_from_sums: sums must be F64 (" + std::to_string(c.n * c.k) + ", 3), got " +
                                  sums.shape().to_string());
    if (c.k - (include_background ? 0 : 1) < 1)
      throw std::invalid_argument("dice: needs at least one non-background class");
    LossResult r{0, zeros(logits.shape())};
    DeviceScratch scratch(*this, labels);
    kernels::dice_from_sums(logits.data(), scratch.labels, static_cast<const double*>(sums.raw()), include_background,
                            r.gradient.data(), scratch.loss, c.n, c.k, c.s, ctx_->stream());
    r.loss = scratch.read_loss();
    return r;
  }

  LossResult dice_cross_entropy(const Tensor& logits, const std::vector<std::int32_t>& labels,
                                bool include_background) override {
    LossResult d = dice_loss(logits, labels, include_background);
    LossResult c = softmax_cross_entropy(logits, labels, 0.f);
    axpby(0.5f, d.gradient, 0.5f, c.gradient);  // MLPerf's DiceCELoss: (dice + CE) / 2
    return LossResult{(d.loss + c.loss) / 2, c.gradient};
  }

  void sgd_update(Tensor& weights, const Tensor& gradients, Tensor& momentum, const SgdUpdate& update) override {
    require_arenas("sgd_update", {&weights, &gradients, &momentum});
    kernels::sgd(weights.data(), gradients.data(), momentum.data(), weights.numel(), update, ctx_->stream());
  }
  void lars_update(Tensor& weights, const Tensor& gradients, Tensor& momentum,
                   const std::vector<ParameterSegment>& segments, const LarsUpdate& update) override {
    require_arenas("lars_update", {&weights, &gradients, &momentum});
    require_segments("lars_update", weights, segments);
    kernels::lars(weights.data(), gradients.data(), momentum.data(), segments, weights.numel(), update, ctx_->stream());
  }
  void adam_update(Tensor& weights, const Tensor& gradients, Tensor& first, Tensor& second,
                   const AdamUpdate& update) override {
    require_arenas("adam_update", {&weights, &gradients, &first, &second});
    kernels::adam(weights.data(), gradients.data(), first.data(), second.data(), weights.numel(), update,
                  ctx_->stream());
  }

  const std::shared_ptr<CudaContext>& context() const { return ctx_; }

 private:
  struct Classes {
    std::int64_t n, k, s;
  };

  // Labels uploaded and a device double for the loss sum, freed with the scope.
  struct DeviceScratch {
    DeviceScratch(CudaBackend& b, const std::vector<std::int32_t>& host_labels) : backend(b) {
      FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&loss), sizeof(double), b.ctx_->stream()));
      if (!host_labels.empty()) {
        FS_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&labels), host_labels.size() * sizeof(std::int32_t),
                                 b.ctx_->stream()));
        b.copy_bytes(labels, Device::Cuda, host_labels.data(), Device::Host, host_labels.size() * sizeof(std::int32_t));
      }
    }
    ~DeviceScratch() {
      cudaFreeAsync(loss, backend.ctx_->stream());
      if (labels) cudaFreeAsync(labels, backend.ctx_->stream());
    }
    double read_loss() {
      double v = 0;
      backend.copy_bytes(&v, Device::Host, loss, Device::Cuda, sizeof(double));
      return v;
    }
    CudaBackend& backend;
    double* loss = nullptr;
    std::int32_t* labels = nullptr;
  };

  // A plain F32 view of an activation-typed tensor (norms and losses compute in float/double).
  Tensor plain_f32(const Tensor& t, const char* op) {
    require_device(t, op, "tensor");
    if (t.shape().rank() < 2)
      throw std::invalid_argument(std::string(op) + ": " + t.shape().to_string() + " has no channels");
    return cast(to_plain(t), DType::F32);
  }

  static void check_sums(const Tensor& sums, const Shape& x, NormGroups groups, const char* op) {
    const std::int64_t g = groups == NormGroups::PerChannel ? x[1] : x[0] * x[1];
    if (sums.dtype() != DType::F64 || sums.shape() != Shape{g, 2} || sums.device() != Device::Cuda)
      throw std::invalid_argument(std::string(op) + ": statistics must be F64 (" + std::to_string(g) +
                                  ", 2) on the GPU, got " + sums.shape().to_string() + " " + dtype_name(sums.dtype()));
  }

  static Classes classes_of(const Tensor& logits, const std::vector<std::int32_t>& labels, const char* op) {
    const Shape& s = logits.shape();
    const Classes c{s[0], s[1], s.spatial_size()};
    if (static_cast<std::int64_t>(labels.size()) != c.n * c.s)
      throw std::invalid_argument(std::string(op) + ": " + std::to_string(labels.size()) + " labels for logits " +
                                  s.to_string());
    for (auto y : labels)
      if (y < 0 || y >= c.k)
        throw std::invalid_argument(std::string(op) + ": label " + std::to_string(y) + " out of range");
    return c;
  }

  std::shared_ptr<CudaContext> ctx_;
};

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_shared<CudaBackend>(options);
}

cudaStream_t stream_of(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (!cuda) throw std::invalid_argument("stream_of: backend " + backend.name() + " is not the CUDA backend");
  return cuda->context()->stream();
}

}  // namespace fanstore::trainer::cuda
