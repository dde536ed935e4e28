// CPU convolution and transposed convolution (2D/3D) on oneDNN, with primitives cached per input layout.
#include <stdexcept>

#include "dnnl_common.hpp"

namespace fanstore::trainer::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// The oneDNN primitive families of a direct or transposed convolution; both have identical APIs.
struct DirectOps {
  using Forward = dnnl::convolution_forward;
  using BackwardData = dnnl::convolution_backward_data;
  using BackwardWeights = dnnl::convolution_backward_weights;
  static constexpr dnnl::algorithm algorithm = dnnl::algorithm::convolution_direct;
};
struct TransposedOps {
  using Forward = dnnl::deconvolution_forward;
  using BackwardData = dnnl::deconvolution_backward_data;
  using BackwardWeights = dnnl::deconvolution_backward_weights;
  static constexpr dnnl::algorithm algorithm = dnnl::algorithm::deconvolution_direct;
};

template <class Ops>
class DnnlConvolution final : public ConvolutionKernel {
 public:
  DnnlConvolution(const ConvolutionSpec& spec, DnnlContext& ctx) : spec_(spec), ctx_(ctx) {
    spec.validate("convolution");
    const auto r = spec.kernel.size();
    for (std::size_t i = 0; i < r; ++i) dilates_.push_back(spec.dilation[i] - 1);  // oneDNN counts gaps
    // oneDNN's weights dims are (out, in, k...) for both families. PyTorch stores a transposed
    // convolution's weight as (in, out, k...), which is oneDNN's "io" order of the same dims.
    dnnl::memory::dims wd{spec.out_channels, spec.in_channels};
    wd.insert(wd.end(), spec.kernel.begin(), spec.kernel.end());
    tag wtag = r == 2 ? (spec.transposed ? tag::iohw : tag::oihw) : (spec.transposed ? tag::iodhw : tag::oidhw);
    user_weights_md_ = dnnl::memory::desc(wd, dt::f32, wtag);
    bias_md_ = dnnl::memory::desc({spec.out_channels}, dt::f32, tag::a);
  }

  Tensor forward(const Tensor& x, const Tensor& w, const Tensor* b, Mode) override {
    prepare(x.shape(), desc_of(x));
    Tensor src = src_fwd_.to(x, fwd_pd_.src_desc(), ctx_);
    dnnl::memory weights = weights_for(fwd_pd_.weights_desc(), w, w_fwd_);
    Tensor y = tensor_for(out_shape_, fwd_pd_.dst_desc());
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, memory_of(src, ctx_.engine)},
                                               {DNNL_ARG_WEIGHTS, weights},
                                               {DNNL_ARG_DST, memory_of(y, ctx_.engine)}};
    if (spec_.bias) {
      if (!b) throw std::invalid_argument("convolution: spec has a bias but none was given");
      args[DNNL_ARG_BIAS] = dnnl::memory(bias_md_, ctx_.engine, const_cast<float*>(b->data()));
    }
    fwd_->execute(ctx_.stream, args);
    return y;
  }

  Tensor backward_data(const Tensor& dy, const Tensor& w) override {
    require_prepared();
    Tensor diff_dst = dy_bwd_data_.to(dy, bwd_data_pd_.diff_dst_desc(), ctx_);
    dnnl::memory weights = weights_for(bwd_data_pd_.weights_desc(), w, w_bwd_);
    Tensor dx = tensor_for(in_shape_, bwd_data_pd_.diff_src_desc());
    bwd_data_->execute(ctx_.stream, {{DNNL_ARG_DIFF_DST, memory_of(diff_dst, ctx_.engine)},
                                     {DNNL_ARG_WEIGHTS, weights},
                                     {DNNL_ARG_DIFF_SRC, memory_of(dx, ctx_.engine)}});
    return dx;
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
    require_prepared();
    Tensor src = src_bwd_weights_.to(x, bwd_weights_pd_.src_desc(), ctx_);
    Tensor diff_dst = dy_bwd_weights_.to(dy, bwd_weights_pd_.diff_dst_desc(), ctx_);
    dnnl::memory user_dw(user_weights_md_, ctx_.engine, dw.data());
    const bool direct = bwd_weights_pd_.diff_weights_desc() == user_weights_md_;
    const auto& dw_md = bwd_weights_pd_.diff_weights_desc();
    dnnl::memory diff_weights = direct ? user_dw : dnnl::memory(dw_md, ctx_.engine, ctx_.scratch(dw_md.get_size()));
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, memory_of(src, ctx_.engine)},
                                               {DNNL_ARG_DIFF_DST, memory_of(diff_dst, ctx_.engine)},
                                               {DNNL_ARG_DIFF_WEIGHTS, diff_weights}};
    if (spec_.bias) {
      if (!db) throw std::invalid_argument("convolution: spec has a bias but no bias gradient was given");
      args[DNNL_ARG_DIFF_BIAS] = dnnl::memory(bias_md_, ctx_.engine, db->data());
    }
    bwd_weights_->execute(ctx_.stream, args);
    if (!direct) dw_reorder_.execute(diff_weights, user_dw, ctx_);
  }

 private:
  // Builds the three primitives the first time and whenever the input shape or layout changes.
  void prepare(const Shape& in, const dnnl::memory::desc& in_md) {
    if (fwd_ && in_md == key_) return;
    out_shape_ = spec_.output_shape(in, "convolution");
    key_ = in_md;
    in_shape_ = in;
    auto src = any_desc(in_shape_), dst = any_desc(out_shape_);
    dnnl::memory::dims wd = user_weights_md_.dims();
    auto weights = dnnl::memory::desc(wd, dt::f32, tag::any);
    auto strides = to_dims(spec_.stride), pad = to_dims(spec_.padding_lo), pad_r = to_dims(spec_.padding_hi);
    // oneDNN takes padding per side (padding_l, padding_r) and accepts a right padding that the last
    // window does not reach, as long as (in + pl + pr - k) / s + 1 equals the output size (floor mode).
    typename Ops::Forward::desc fd =
        spec_.bias ? typename Ops::Forward::desc(dnnl::prop_kind::forward_training, Ops::algorithm, src, weights,
                                                 bias_md_, dst, strides, dilates_, pad, pad_r)
                   : typename Ops::Forward::desc(dnnl::prop_kind::forward_training, Ops::algorithm, src, weights, dst,
                                                 strides, dilates_, pad, pad_r);
    fwd_pd_ = typename Ops::Forward::primitive_desc(fd, ctx_.engine);
    fwd_.emplace(fwd_pd_);
    typename Ops::BackwardData::desc bd(Ops::algorithm, src, weights, dst, strides, dilates_, pad, pad_r);
    bwd_data_pd_ = typename Ops::BackwardData::primitive_desc(bd, ctx_.engine, fwd_pd_);
    bwd_data_.emplace(bwd_data_pd_);
    typename Ops::BackwardWeights::desc wdsc =
        spec_.bias
            ? typename Ops::BackwardWeights::desc(Ops::algorithm, src, weights, bias_md_, dst, strides, dilates_, pad,
                                                  pad_r)
            : typename Ops::BackwardWeights::desc(Ops::algorithm, src, weights, dst, strides, dilates_, pad, pad_r);
    bwd_weights_pd_ = typename Ops::BackwardWeights::primitive_desc(wdsc, ctx_.engine, fwd_pd_);
    bwd_weights_.emplace(bwd_weights_pd_);
  }

  void require_prepared() const {
    if (!fwd_) throw std::logic_error("convolution: backward called before forward");
  }

  // The weights in the layout a primitive wants: the arena view itself, or a reordered copy in the
  // context's scratch (made afresh each call: the weights change every step).
  dnnl::memory weights_for(const dnnl::memory::desc& wanted, const Tensor& w, CachedReorder& reorder) {
    dnnl::memory user(user_weights_md_, ctx_.engine, const_cast<float*>(w.data()));
    if (wanted == user_weights_md_) return user;
    dnnl::memory converted(wanted, ctx_.engine, ctx_.scratch(wanted.get_size()));
    reorder.execute(user, converted, ctx_);
    return converted;
  }

  ConvolutionSpec spec_;
  DnnlContext& ctx_;
  dnnl::memory::dims dilates_;
  dnnl::memory::desc user_weights_md_, bias_md_, key_;
  Shape in_shape_, out_shape_;
  typename Ops::Forward::primitive_desc fwd_pd_;
  typename Ops::BackwardData::primitive_desc bwd_data_pd_;
  typename Ops::BackwardWeights::primitive_desc bwd_weights_pd_;
  std::optional<typename Ops::Forward> fwd_;
  std::optional<typename Ops::BackwardData> bwd_data_;
  std::optional<typename Ops::BackwardWeights> bwd_weights_;
  CachedReorder src_fwd_, src_bwd_weights_, dy_bwd_data_, dy_bwd_weights_, w_fwd_, w_bwd_, dw_reorder_;
};

}  // namespace

std::unique_ptr<ConvolutionKernel> make_dnnl_convolution(const ConvolutionSpec& spec, DnnlContext& ctx) {
  if (spec.transposed) return std::make_unique<DnnlConvolution<TransposedOps>>(spec, ctx);
  return std::make_unique<DnnlConvolution<DirectOps>>(spec, ctx);
}

}  // namespace fanstore::trainer::cpu
