// CPU max/average pooling (2D/3D) on oneDNN; max pooling keeps oneDNN's argmax workspace for backward.
#include <stdexcept>

#include "dnnl_common.hpp"

namespace fanstore::trainer::cpu {
namespace {

class DnnlPooling final : public PoolingKernel {
 public:
  DnnlPooling(const PoolingSpec& spec, DnnlContext& ctx) : spec_(spec), ctx_(ctx) { spec.validate("pooling"); }

  Tensor forward(const Tensor& x, Mode mode) override {
    prepare(x.shape(), desc_of(x), mode);
    Tensor y = tensor_for(out_shape_, fwd_pd_.dst_desc());
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, memory_of(x, ctx_.engine)},
                                               {DNNL_ARG_DST, memory_of(y, ctx_.engine)}};
    workspace_ = dnnl::memory();  // inference keeps nothing, also after a training forward without its backward
    if (mode == Mode::Train && spec_.kind == PoolingKind::Max) {
      workspace_ = dnnl::memory(fwd_pd_.workspace_desc(), ctx_.engine);
      args[DNNL_ARG_WORKSPACE] = workspace_;
    }
    fwd_->execute(ctx_.stream, args);
    return y;
  }

  Tensor backward(const Tensor& dy) override {
    if (!bwd_) throw std::logic_error("pooling: backward needs a forward in Mode::Train first");
    Tensor diff_dst = dy_reorder_.to(dy, bwd_pd_.diff_dst_desc(), ctx_);
    Tensor dx = tensor_for(in_shape_, bwd_pd_.diff_src_desc());
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DIFF_DST, memory_of(diff_dst, ctx_.engine)},
                                               {DNNL_ARG_DIFF_SRC, memory_of(dx, ctx_.engine)}};
    if (spec_.kind == PoolingKind::Max) {
      if (!workspace_) throw std::logic_error("max pooling: backward needs a forward in Mode::Train first");
      args[DNNL_ARG_WORKSPACE] = workspace_;
    }
    bwd_->execute(ctx_.stream, args);
    workspace_ = dnnl::memory();  // the indices serve one backward
    return dx;
  }

 private:
  dnnl::algorithm algorithm() const {
    return spec_.kind == PoolingKind::Max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_include_padding;
  }

  void prepare(const Shape& in, const dnnl::memory::desc& in_md, Mode mode) {
    if (fwd_ && in_md == key_ && mode == mode_) return;
    out_shape_ = spec_.output_shape(in, "pooling");
    key_ = in_md;
    mode_ = mode;
    in_shape_ = in;
    auto strides = to_dims(spec_.stride), kernel = to_dims(spec_.kernel);
    auto pad = to_dims(spec_.padding_lo), pad_r = to_dims(spec_.padding_hi);
    auto prop = mode == Mode::Train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    dnnl::pooling_forward::desc fd(prop, algorithm(), in_md, any_desc(out_shape_), strides, kernel, pad, pad_r);
    fwd_pd_ = dnnl::pooling_forward::primitive_desc(fd, ctx_.engine);
    fwd_.emplace(fwd_pd_);
    bwd_.reset();
    if (mode == Mode::Train) {
      // Backward in the forward's layouts, so the max-pool workspace indices line up.
      dnnl::pooling_backward::desc bd(algorithm(), in_md, fwd_pd_.dst_desc(), strides, kernel, pad, pad_r);
      bwd_pd_ = dnnl::pooling_backward::primitive_desc(bd, ctx_.engine, fwd_pd_);
      bwd_.emplace(bwd_pd_);
    }
  }

  PoolingSpec spec_;
  DnnlContext& ctx_;
  dnnl::memory::desc key_;
  Mode mode_ = Mode::Train;
  Shape in_shape_, out_shape_;
  dnnl::pooling_forward::primitive_desc fwd_pd_;
  dnnl::pooling_backward::primitive_desc bwd_pd_;
  std::optional<dnnl::pooling_forward> fwd_;
  std::optional<dnnl::pooling_backward> bwd_;
  dnnl::memory workspace_;
  CachedReorder dy_reorder_;
};

}  // namespace

std::unique_ptr<PoolingKernel> make_dnnl_pooling(const PoolingSpec& spec, DnnlContext& ctx) {
  return std::make_unique<DnnlPooling>(spec, ctx);
}

}  // namespace fanstore::trainer::cpu
