// CPU element-wise activations (ReLU, LeakyReLU, tanh, scale) on oneDNN, in the input's own layout.
#include <stdexcept>

#include "dnnl_common.hpp"

namespace fanstore::trainer::cpu {
namespace {

class DnnlEltwise final : public EltwiseKernel {
 public:
  DnnlEltwise(const EltwiseSpec& spec, DnnlContext& ctx) : spec_(spec), ctx_(ctx) {}

  Tensor forward(const Tensor& x) override {
    prepare(desc_of(x));
    Tensor y = tensor_for(x.shape(), key_);
    fwd_->execute(ctx_.stream, {{DNNL_ARG_SRC, memory_of(x, ctx_.engine)}, {DNNL_ARG_DST, memory_of(y, ctx_.engine)}});
    return y;
  }

  Tensor backward(Tensor dy, const Tensor& y) override {
    prepare(desc_of(y));
    Tensor diff_dst = dy_reorder_.to(dy, key_, ctx_);
    dy = Tensor();
    // oneDNN's eltwise backward may write diff_src over diff_dst: in place when nobody else reads it.
    Tensor dx = diff_dst.sole_owner() ? diff_dst : tensor_for(y.shape(), key_);
    // The *_use_dst_for_bwd algorithms read the output; linear's derivative is its slope whatever it reads.
    const int data_arg = spec_.kind == EltwiseKind::Scale ? DNNL_ARG_SRC : DNNL_ARG_DST;
    bwd_->execute(ctx_.stream, {{data_arg, memory_of(y, ctx_.engine)},
                                {DNNL_ARG_DIFF_DST, memory_of(diff_dst, ctx_.engine)},
                                {DNNL_ARG_DIFF_SRC, memory_of(dx, ctx_.engine)}});
    return dx;
  }

 private:
  // oneDNN's (algorithm, alpha, beta) for the spec, backward from the output: relu's alpha is its negative
  // slope, linear is alpha*x+beta.
  std::tuple<dnnl::algorithm, float, float> parameters() const {
    switch (spec_.kind) {
      case EltwiseKind::ReLU: return {dnnl::algorithm::eltwise_relu_use_dst_for_bwd, 0.f, 0.f};
      case EltwiseKind::LeakyReLU: return {dnnl::algorithm::eltwise_relu_use_dst_for_bwd, spec_.alpha, 0.f};
      case EltwiseKind::Tanh: return {dnnl::algorithm::eltwise_tanh_use_dst_for_bwd, 0.f, 0.f};
      case EltwiseKind::Scale: return {dnnl::algorithm::eltwise_linear, spec_.alpha, 0.f};
    }
    throw std::logic_error("eltwise: unknown kind");
  }

  void prepare(const dnnl::memory::desc& md) {
    if (fwd_ && md == key_) return;
    key_ = md;
    auto [alg, alpha, beta] = parameters();
    dnnl::eltwise_forward::desc fd(dnnl::prop_kind::forward_training, alg, md, alpha, beta);
    auto fwd_pd = dnnl::eltwise_forward::primitive_desc(fd, ctx_.engine);
    fwd_.emplace(fwd_pd);
    dnnl::eltwise_backward::desc bd(alg, md, md, alpha, beta);
    bwd_.emplace(dnnl::eltwise_backward::primitive_desc(bd, ctx_.engine, fwd_pd));
  }

  EltwiseSpec spec_;
  DnnlContext& ctx_;
  dnnl::memory::desc key_;
  std::optional<dnnl::eltwise_forward> fwd_;
  std::optional<dnnl::eltwise_backward> bwd_;
  CachedReorder dy_reorder_;
};

}  // namespace

std::unique_ptr<EltwiseKernel> make_dnnl_eltwise(const EltwiseSpec& spec, DnnlContext& ctx) {
  return std::make_unique<DnnlEltwise>(spec, ctx);
}

}  // namespace fanstore::trainer::cpu
