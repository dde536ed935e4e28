// CPU batch normalisation (any rank, any layout) on oneDNN, in training (batch stats) or eval mode.
#include <stdexcept>

#include "dnnl_common.hpp"

namespace fanstore::trainer::cpu {
namespace {

using flags = dnnl::normalization_flags;

class DnnlBatchNorm final : public BatchNormKernel {
 public:
  DnnlBatchNorm(float epsilon, DnnlContext& ctx) : epsilon_(epsilon), ctx_(ctx) {}

  Tensor forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& mean, Tensor& variance,
                 Mode mode) override {
    prepare(desc_of(x), mode);
    Tensor y = tensor_for(x.shape(), fwd_pd_.dst_desc());
    fwd_->execute(ctx_.stream, {{DNNL_ARG_SRC, memory_of(x, ctx_.engine)},
                                {DNNL_ARG_SCALE, memory_of(gamma, ctx_.engine)},
                                {DNNL_ARG_SHIFT, memory_of(beta, ctx_.engine)},
                                {DNNL_ARG_MEAN, memory_of(mean, ctx_.engine)},
                                {DNNL_ARG_VARIANCE, memory_of(variance, ctx_.engine)},
                                {DNNL_ARG_DST, memory_of(y, ctx_.engine)}});
    if (mode == Mode::Train) {
      x_ = x;
      beta_ = beta;
      mean_ = mean;
      variance_ = variance;
    } else {
      x_ = beta_ = mean_ = variance_ = Tensor();  // inference keeps nothing
    }
    return y;
  }

  Tensor backward(const Tensor& dy, const Tensor& gamma, Tensor& dgamma, Tensor& dbeta) override {
    if (!x_.defined()) throw std::logic_error("batch norm: backward needs a forward in Mode::Train first");
    Tensor diff_dst = dy_reorder_.to(dy, key_, ctx_);
    Tensor dx = tensor_for(x_.shape(), bwd_pd_.diff_src_desc());
    bwd_->execute(ctx_.stream, {{DNNL_ARG_SRC, memory_of(x_, ctx_.engine)},
                                {DNNL_ARG_MEAN, memory_of(mean_, ctx_.engine)},
                                {DNNL_ARG_VARIANCE, memory_of(variance_, ctx_.engine)},
                                {DNNL_ARG_DIFF_DST, memory_of(diff_dst, ctx_.engine)},
                                {DNNL_ARG_SCALE, memory_of(gamma, ctx_.engine)},
                                // oneDNN 2.6 refuses to execute a use_shift backward without SHIFT.
                                {DNNL_ARG_SHIFT, memory_of(beta_, ctx_.engine)},
                                {DNNL_ARG_DIFF_SRC, memory_of(dx, ctx_.engine)},
                                {DNNL_ARG_DIFF_SCALE, memory_of(dgamma, ctx_.engine)},
                                {DNNL_ARG_DIFF_SHIFT, memory_of(dbeta, ctx_.engine)}});
    x_ = beta_ = mean_ = variance_ = Tensor();  // they serve one backward
    return dx;
  }

 private:
  void prepare(const dnnl::memory::desc& md, Mode mode) {
    if (fwd_ && md == key_ && mode == mode_) return;
    key_ = md;
    mode_ = mode;
    const bool train = mode == Mode::Train;
    auto f = flags::use_scale | flags::use_shift;
    if (!train) f = f | flags::use_global_stats;  // Eval normalises with the running statistics
    dnnl::batch_normalization_forward::desc fd(
        train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, md, epsilon_, f);
    fwd_pd_ = dnnl::batch_normalization_forward::primitive_desc(fd, ctx_.engine);
    fwd_.emplace(fwd_pd_);
    bwd_.reset();
    if (!train) return;  // no backward after inference
    dnnl::batch_normalization_backward::desc bd(dnnl::prop_kind::backward, md, md, epsilon_, f);
    bwd_pd_ = dnnl::batch_normalization_backward::primitive_desc(bd, ctx_.engine, fwd_pd_);
    bwd_.emplace(bwd_pd_);
  }

  float epsilon_;
  DnnlContext& ctx_;
  dnnl::memory::desc key_;
  Mode mode_ = Mode::Train;
  dnnl::batch_normalization_forward::primitive_desc fwd_pd_;
  dnnl::batch_normalization_backward::primitive_desc bwd_pd_;
  std::optional<dnnl::batch_normalization_forward> fwd_;
  std::optional<dnnl::batch_normalization_backward> bwd_;
  Tensor x_, beta_, mean_, variance_;  // saved for backward
  CachedReorder dy_reorder_;
};

}  // namespace

std::unique_ptr<BatchNormKernel> make_dnnl_batch_norm(float epsilon, DnnlContext& ctx) {
  return std::make_unique<DnnlBatchNorm>(epsilon, ctx);
}

}  // namespace fanstore::trainer::cpu
