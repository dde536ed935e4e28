// CPU fully connected layer (y = x W^T + b) on oneDNN's inner product.
#include <stdexcept>

#include "dnnl_common.hpp"

namespace fanstore::trainer::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

class DnnlInnerProduct final : public InnerProductKernel {
 public:
  DnnlInnerProduct(bool bias, DnnlContext& ctx) : bias_(bias), ctx_(ctx) {}

  Tensor forward(const Tensor& x, const Tensor& w, const Tensor* b, Mode) override {
    prepare(x, w);
    Tensor src = src_fwd_.to(x, fwd_pd_.src_desc(), ctx_);
    Tensor weights = w_fwd_.to(w, fwd_pd_.weights_desc(), ctx_);
    Tensor y = tensor_for(out_shape_, fwd_pd_.dst_desc());
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, memory_of(src, ctx_.engine)},
                                               {DNNL_ARG_WEIGHTS, memory_of(weights, ctx_.engine)},
                                               {DNNL_ARG_DST, memory_of(y, ctx_.engine)}};
    if (bias_) args[DNNL_ARG_BIAS] = memory_of(*b, ctx_.engine);
    fwd_->execute(ctx_.stream, args);
    return y;
  }

  Tensor backward_data(const Tensor& dy, const Tensor& w) override {
    Tensor diff_dst = dy_bwd_data_.to(dy, bwd_data_pd_.diff_dst_desc(), ctx_);
    Tensor weights = w_bwd_.to(w, bwd_data_pd_.weights_desc(), ctx_);
    Tensor dx = tensor_for(in_shape_, bwd_data_pd_.diff_src_desc());
    bwd_data_->execute(ctx_.stream, {{DNNL_ARG_DIFF_DST, memory_of(diff_dst, ctx_.engine)},
                                     {DNNL_ARG_WEIGHTS, memory_of(weights, ctx_.engine)},
                                     {DNNL_ARG_DIFF_SRC, memory_of(dx, ctx_.engine)}});
    return dx;
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
    Tensor src = src_bwd_weights_.to(x, bwd_weights_pd_.src_desc(), ctx_);
    Tensor diff_dst = dy_bwd_weights_.to(dy, bwd_weights_pd_.diff_dst_desc(), ctx_);
    const bool direct = bwd_weights_pd_.diff_weights_desc() == desc_of(dw);
    Tensor diff_weights = direct ? dw : tensor_for(dw.shape(), bwd_weights_pd_.diff_weights_desc());
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, memory_of(src, ctx_.engine)},
                                               {DNNL_ARG_DIFF_DST, memory_of(diff_dst, ctx_.engine)},
                                               {DNNL_ARG_DIFF_WEIGHTS, memory_of(diff_weights, ctx_.engine)}};
    if (bias_) args[DNNL_ARG_DIFF_BIAS] = memory_of(*db, ctx_.engine);
    bwd_weights_->execute(ctx_.stream, args);
    if (!direct) dw_reorder_.into(diff_weights, desc_of(dw), dw.data(), ctx_);
  }

 private:
  void prepare(const Tensor& x, const Tensor& w) {
    auto md = desc_of(x);
    if (fwd_ && md == key_) return;
    if (x.shape().rank() != 2 || x.shape()[1] != w.shape()[1])
      throw std::invalid_argument("linear: input " + x.shape().to_string() + " does not match weight " +
                                  w.shape().to_string() + " (flatten first)");
    key_ = md;
    in_shape_ = x.shape();
    out_shape_ = Shape{x.shape()[0], w.shape()[0]};
    auto src = any_desc(in_shape_), weights = any_desc(w.shape()), dst = any_desc(out_shape_);
    dnnl::memory::desc bias_md({w.shape()[0]}, dt::f32, tag::a);
    auto fd = bias_ ? dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights, bias_md, dst)
                    : dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights, dst);
    fwd_pd_ = dnnl::inner_product_forward::primitive_desc(fd, ctx_.engine);
    fwd_.emplace(fwd_pd_);
    dnnl::inner_product_backward_data::desc bd(src, weights, dst);
    bwd_data_pd_ = dnnl::inner_product_backward_data::primitive_desc(bd, ctx_.engine, fwd_pd_);
    bwd_data_.emplace(bwd_data_pd_);
    auto wd = bias_ ? dnnl::inner_product_backward_weights::desc(src, weights, bias_md, dst)
                    : dnnl::inner_product_backward_weights::desc(src, weights, dst);
    bwd_weights_pd_ = dnnl::inner_product_backward_weights::primitive_desc(wd, ctx_.engine, fwd_pd_);
    bwd_weights_.emplace(bwd_weights_pd_);
  }

  bool bias_;
  DnnlContext& ctx_;
  dnnl::memory::desc key_;
  Shape in_shape_, out_shape_;
  dnnl::inner_product_forward::primitive_desc fwd_pd_;
  dnnl::inner_product_backward_data::primitive_desc bwd_data_pd_;
  dnnl::inner_product_backward_weights::primitive_desc bwd_weights_pd_;
  std::optional<dnnl::inner_product_forward> fwd_;
  std::optional<dnnl::inner_product_backward_data> bwd_data_;
  std::optional<dnnl::inner_product_backward_weights> bwd_weights_;
  CachedReorder src_fwd_, src_bwd_weights_, dy_bwd_data_, dy_bwd_weights_, w_fwd_, w_bwd_, dw_reorder_;
};

}  // namespace

std::unique_ptr<InnerProductKernel> make_dnnl_inner_product(bool bias, DnnlContext& ctx) {
  return std::make_unique<DnnlInnerProduct>(bias, ctx);
}

}  // namespace fanstore::trainer::cpu
