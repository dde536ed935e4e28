// The CPU backend: host memory, one oneDNN engine and stream, kernel factories, layout conversion,
// and the host implementations of the remaining ops (host_ops.hpp).
#include <omp.h>

#include <cstring>
#include <stdexcept>

#include "dnnl_common.hpp"
#include "host_ops.hpp"

namespace fanstore::trainer {
namespace cpu {
namespace {

class DnnlBackend final : public Backend {
 public:
  explicit DnnlBackend(const CpuBackendOptions& options) {
    // Fixed thread counts make results reproducible run to run (oneDNN's reductions split by thread).
    if (options.threads > 0) omp_set_num_threads(options.threads);
    threads_ = options.threads > 0 ? options.threads : omp_get_max_threads();
  }

  std::string name() const override { return "cpu-onednn"; }
  std::string describe() const override {
    return "cpu-onednn, " + std::to_string(threads_) + " thread" + (threads_ == 1 ? "" : "s");
  }
  Device device() const override { return Device::Host; }

  std::shared_ptr<Storage> allocate(std::size_t bytes) override { return Storage::host(bytes); }
  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) override {
    if (dst_device != Device::Host || src_device != Device::Host)
      throw std::invalid_argument("copy_bytes: the CPU backend cannot reach " +
                                  std::string(device_name(dst_device != Device::Host ? dst_device : src_device)) +
                                  " memory");
    if (bytes) std::memmove(dst, src, bytes);
  }
  void synchronize() override { ctx_.stream.wait(); }

  Tensor cast(const Tensor& t, DType to) override {
    require_device(t, "cast", "tensor");
    if (t.dtype() == to) return t;
    throw std::invalid_argument(std::string("cast: the CPU backend computes in f32 and does not convert ") +
                                dtype_name(t.dtype()) + " to " + dtype_name(to));
  }

  Tensor to_plain(const Tensor& t) override {
    require_device(t, "to_plain", "tensor");
    if (t.is_plain()) return t;
    Tensor out = Tensor::zeros(t.shape());
    auto src = memory_of(t, ctx_.engine), dst = memory_of(out, ctx_.engine);
    dnnl::reorder(src, dst).execute(ctx_.stream, src, dst);
    return out;
  }

  Tensor to_layout_of(const Tensor& t, const Tensor& like) override {
    require_device(t, "to_layout_of", "tensor");
    if (t.same_layout(like)) return t;
    Tensor out = Tensor::with_layout(like.shape(), like.layout());
    auto src = memory_of(t, ctx_.engine);
    auto dst = memory_of(out, ctx_.engine);
    dnnl::reorder(src, dst).execute(ctx_.stream, src, dst);
    return out;
  }

  std::unique_ptr<ConvolutionKernel> make_convolution(const ConvolutionSpec& spec) override {
    return make_dnnl_convolution(spec, ctx_);
  }
  std::unique_ptr<PoolingKernel> make_pooling(const PoolingSpec& spec) override {
    return make_dnnl_pooling(spec, ctx_);
  }
  std::unique_ptr<BatchNormKernel> make_batch_norm(float epsilon) override {
    return make_dnnl_batch_norm(epsilon, ctx_);
  }
  std::unique_ptr<EltwiseKernel> make_eltwise(const EltwiseSpec& spec) override {
    return make_dnnl_eltwise(spec, ctx_);
  }
  std::unique_ptr<InnerProductKernel> make_inner_product(bool bias) override {
    return make_dnnl_inner_product(bias, ctx_);
  }

  void axpby(float a, const Tensor& x, float b, Tensor& y) override {
    require_device(x, "axpby", "x");
    require_device(y, "axpby", "y");
    if (!x.same_layout(y) || x.dtype() != DType::F32)
      throw std::invalid_argument("axpby: x " + x.shape().to_string() + " and y " + y.shape().to_string() +
                                  " must be F32 of one shape and layout");
    cpu::axpby(a, x, b, y);
  }
  void fill(Tensor& t, float value) override {
    require_device(t, "fill", "tensor");
    cpu::fill(t, value);
  }
  bool all_finite(const Tensor& t) override {
    require_device(t, "all_finite", "tensor");
    return cpu::all_finite(t);
  }
  void copy_box(const Tensor& src, const Box& src_box, Tensor& dst, const Box& dst_box, CopyMode mode) override {
    require_device(src, "copy_box", "source");
    require_device(dst, "copy_box", "destination");
    cpu::copy_box(src, src_box, dst, dst_box, mode);
  }
  Tensor dropout(const Tensor& x, const DropoutMask& mask) override {
    require_device(x, "dropout", "input");
    return cpu::dropout(to_plain(x), mask);
  }

  Tensor norm_sums(const Tensor& x, NormGroups groups) override {
    require_device(x, "norm_sums", "x");
    return cpu::norm_sums(x, groups);
  }
  Tensor norm_apply(const Tensor& x, const Tensor& sums, double count, const Tensor& gamma, const Tensor& beta,
                    float epsilon, NormGroups groups) override {
    for (const Tensor* t : {&x, &sums, &gamma, &beta}) require_device(*t, "norm_apply", "operand");
    return cpu::norm_apply(x, sums, count, gamma, beta, epsilon, groups);
  }
  Tensor norm_backward_sums(const Tensor& dy, const Tensor& x, const Tensor& sums, double count, float epsilon,
                            NormGroups groups) override {
    for (const Tensor* t : {&dy, &x, &sums}) require_device(*t, "norm_backward_sums", "operand");
    return cpu::norm_backward_sums(to_plain(dy), x, sums, count, epsilon, groups);
  }
  Tensor norm_backward_apply(const Tensor& dy, const Tensor& x, const Tensor& sums, const Tensor& backward_sums,
                             double count, const Tensor& gamma, float epsilon, NormGroups groups, Tensor& dgamma,
                             Tensor& dbeta) override {
    for (const Tensor* t : {&dy, &x, &sums, &backward_sums, &gamma, static_cast<const Tensor*>(&dgamma),
                            static_cast<const Tensor*>(&dbeta)})
      require_device(*t, "norm_backward_apply", "operand");
    return cpu::norm_backward_apply(to_plain(dy), x, sums, backward_sums, count, gamma, epsilon, groups, dgamma, dbeta);
  }

  LossResult softmax_cross_entropy(const Tensor& logits, const std::vector<std::int32_t>& labels,
                                   float label_smoothing) override {
    require_device(logits, "softmax_cross_entropy", "logits");
    return trainer::softmax_cross_entropy(to_plain(logits), labels, label_smoothing);
  }
  LossResult mean_squared_error(const Tensor& prediction, const std::vector<float>& target) override {
    require_device(prediction, "mean_squared_error", "prediction");
    if (target.size() != static_cast<std::size_t>(prediction.numel()))
      throw std::invalid_argument("mse: " + std::to_string(target.size()) +
                                  " target values for a prediction of shape " + prediction.shape().to_string());
    Tensor t = Tensor::zeros(prediction.shape());
    std::memcpy(t.data(), target.data(), target.size() * sizeof(float));
    return trainer::mean_squared_error(to_plain(prediction), t);
  }
  LossResult dice_loss(const Tensor& logits, const std::vector<std::int32_t>& labels,
                       bool include_background) override {
    require_device(logits, "dice_loss", "logits");
    return trainer::dice_loss(to_plain(logits), labels, include_background);
  }
  LossResult dice_cross_entropy(const Tensor& logits, const std::vector<std::int32_t>& labels,
                                bool include_background) override {
    require_device(logits, "dice_cross_entropy", "logits");
    return trainer::dice_cross_entropy(to_plain(logits), labels, include_background);
  }
  Tensor dice_sums(const Tensor& logits, const std::vector<std::int32_t>& labels) override {
    require_device(logits, "dice_sums", "logits");
    const std::vector<double> sums = trainer::dice_sums(to_plain(logits), labels);
    Tensor t = zeros(Shape{static_cast<std::int64_t>(sums.size() / 3), 3}, DType::F64);
    std::memcpy(t.raw(), sums.data(), sums.size() * sizeof(double));
    return t;
  }
  LossResult dice_loss_from_sums(const Tensor& logits, const std::vector<std::int32_t>& labels, const Tensor& sums,
                                 bool include_background) override {
    require_device(logits, "dice_loss_from_sums", "logits");
    require_device(sums, "dice_loss_from_sums", "sums");
    if (sums.dtype() != DType::F64) throw std::invalid_argument("dice_loss_from_sums: sums must be F64");
    const auto* p = static_cast<const double*>(sums.raw());
    return trainer::dice_loss_from_sums(to_plain(logits), labels, std::vector<double>(p, p + sums.numel()),
                                        include_background);
  }

  void sgd_update(Tensor& weights, const Tensor& gradients, Tensor& momentum, const SgdUpdate& update) override {
    require_arenas("sgd_update", {&weights, &gradients, &momentum});
    cpu::sgd_update(weights, gradients, momentum, update);
  }
  void lars_update(Tensor& weights, const Tensor& gradients, Tensor& momentum,
                   const std::vector<ParameterSegment>& segments, const LarsUpdate& update) override {
    require_arenas("lars_update", {&weights, &gradients, &momentum});
    require_segments("lars_update", weights, segments);
    cpu::lars_update(weights, gradients, momentum, segments, update);
  }
  void adam_update(Tensor& weights, const Tensor& gradients, Tensor& first, Tensor& second,
                   const AdamUpdate& update) override {
    require_arenas("adam_update", {&weights, &gradients, &first, &second});
    cpu::adam_update(weights, gradients, first, second, update);
  }

 private:
  DnnlContext ctx_;
  int threads_ = 1;
};

}  // namespace
}  // namespace cpu

std::shared_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_shared<cpu::DnnlBackend>(options);
}

}  // namespace fanstore::trainer
