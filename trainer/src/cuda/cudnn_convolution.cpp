// Convolution and transposed convolution (2D/3D) on cuDNN: per-side padding through the symmetric
// plan (a border copied in, or cropped off), algorithms found once per shape and cached, weights
// converted to the activation type and layout, weight gradients converted back to the F32 arena.
#include <sstream>
#include <stdexcept>

#include "cuda/cuda_kernels.hpp"
#include "cuda/cuda_layout_helpers.hpp"
#include "cuda/cudnn_descriptors.hpp"

namespace fanstore::trainer::cuda {
namespace {

enum class Op { Forward, BackwardData, BackwardFilter };
const char* op_name(Op op) { return op == Op::Forward ? "fwd" : op == Op::BackwardData ? "bwd-data" : "bwd-filter"; }

class CudnnConvolution final : public ConvolutionKernel {
 public:
  CudnnConvolution(const ConvolutionSpec& spec, Backend& backend, std::shared_ptr<CudaContext> ctx)
      : spec_(spec),
        plan_(ops::plan_symmetric_padding(spec.padding_lo, spec.padding_hi)),
        backend_(backend),
        ctx_(std::move(ctx)) {
    spec_.validate("convolution");
    conv_.set(plan_.symmetric, spec_.stride, spec_.dilation);
    filter_shape_ = Shape{spec_.transposed ? spec_.in_channels : spec_.out_channels,
                          spec_.transposed ? spec_.out_channels : spec_.in_channels};
    for (auto k : spec_.kernel) filter_shape_.dims.push_back(k);
  }

  Tensor forward(const Tensor& x_any, const Tensor& w, const Tensor* b, Mode mode) override {
    const Tensor x = prepared(backend_, *ctx_, x_any);
    prepare(x.shape());
    const Tensor wk = filter_for(w);
    Tensor y, input;
    if (!spec_.transposed) {
      input = plan_.needs_border() ? bordered(backend_, *ctx_, x, plan_, 0.f) : x;
      y = activation_zeros(backend_, *ctx_, out_);
      run(Op::Forward, input, wk, y);
    } else {
      // Transposed = the backward-data pass of the convolution whose input is our (uncropped) output.
      input = x;
      Tensor full = activation_zeros(backend_, *ctx_, conv_x_);
      run(Op::BackwardData, full, wk, x);
      y = plan_.needs_border() ? cropped(backend_, *ctx_, full, plan_.crop(out_)) : full;
    }
    saved_ = mode == Mode::Train ? std::move(input) : Tensor();
    if (spec_.bias) {
      if (!b) throw std::invalid_argument("convolution: spec has a bias but none was given");
      const Shape& s = y.shape();
      kernels::add_channel_bias(y.dtype(), y.raw(), b->data(), s[0], s[1], s.spatial_size(), is_channels_last(y),
                                ctx_->stream());
    }
    return y;
  }

  Tensor backward_data(const Tensor& dy_any, const Tensor& w) override {
    require_prepared();
    const Tensor dy = prepared(backend_, *ctx_, dy_any);
    const Tensor wk = filter_for(w);
    if (!spec_.transposed) {
      Tensor dx = activation_zeros(backend_, *ctx_, conv_x_);
      run(Op::BackwardData, dx, wk, dy);
      return plan_.needs_border() ? cropped(backend_, *ctx_, dx, plan_.interior(in_)) : dx;
    }
    const Tensor dy_full = plan_.needs_border() ? bordered(backend_, *ctx_, dy, plan_, 0.f) : dy;
    Tensor dx = activation_zeros(backend_, *ctx_, in_);
    run(Op::Forward, dy_full, wk, dx);
    return dx;
  }

  void backward_weights(const Tensor&, const Tensor& dy_any, Tensor& dw, Tensor* db) override {
    require_prepared();
    if (!saved_.defined()) throw std::logic_error("convolution: backward_weights needs a forward in Mode::Train first");
    const Tensor saved = std::move(saved_);  // freed once the kernels queued on the stream are done with it
    const Tensor dy = prepared(backend_, *ctx_, dy_any);
    const bool direct = ctx_->activation_type() == DType::F32 && !filter_channels_last();
    Tensor target = direct ? dw : filter_zeros();
    if (!spec_.transposed) {
      run(Op::BackwardFilter, saved, target, dy);
    } else {
      const Tensor dy_full = plan_.needs_border() ? bordered(backend_, *ctx_, dy, plan_, 0.f) : dy;
      run(Op::BackwardFilter, dy_full, target, saved);
    }
    if (!direct) filter_back(target, dw);
    if (spec_.bias) {
      if (!db) throw std::invalid_argument("convolution: spec has a bias but no bias gradient was given");
      const Shape& s = dy.shape();
      kernels::channel_sums(dy.dtype(), dy.raw(), db->data(), s[0], s[1], s.spatial_size(), is_channels_last(dy),
                            ctx_->stream());
    }
  }

 private:
  bool filter_channels_last() const { return ctx_->channels_last(); }

  // Shapes and descriptors for an input shape. cuDNN's "x" is the convolution's input: the
  // bordered layer input (direct) or the uncropped layer output (transposed); its "y" is the
  // layer output (direct) or the layer input (transposed).
  void prepare(const Shape& in) {
    if (prepared_ && in == in_) return;
    out_ = spec_.output_shape(in, "convolution");
    in_ = in;
    conv_x_ = spec_.transposed ? plan_.uncropped(out_) : plan_.bordered(in_);
    conv_y_ = spec_.transposed ? in_ : out_;
    const DType type = ctx_->activation_type();
    const bool cl = wants_channels_last(*ctx_, in_);
    xd_.set(conv_x_, type, cl);
    yd_.set(conv_y_, type, cl);
    wd_.set(filter_shape_, type, filter_channels_last());
    prepared_ = true;
  }

  void require_prepared() const {
    if (!prepared_) throw std::logic_error("convolution: backward called before forward");
  }

  Tensor filter_zeros() { return backend_.zeros(filter_shape_, ctx_->activation_type()); }

  // The weights as cuDNN reads them: the arena view itself in fp32 NCHW, else a converted copy.
  Tensor filter_for(const Tensor& w) {
    const DType type = ctx_->activation_type();
    if (type == DType::F32 && !filter_channels_last()) return w;
    Tensor typed = backend_.cast(w, type);
    if (!filter_channels_last()) return typed;
    Tensor out = filter_zeros();
    const std::int64_t k = filter_shape_[0], c = filter_shape_[1], s = filter_shape_.numel() / (k * c);
    kernels::to_channels_last(type, typed.raw(), out.raw(), k, c, s, ctx_->stream());
    return out;
  }

  // A gradient in the filter's type/layout written into the F32 plain arena view dw.
  void filter_back(const Tensor& g, Tensor& dw) {
    const DType type = ctx_->activation_type();
    Tensor plain = g;
    if (filter_channels_last()) {
      plain = filter_zeros();
      const std::int64_t k = filter_shape_[0], c = filter_shape_[1], s = filter_shape_.numel() / (k * c);
      kernels::from_channels_last(type, g.raw(), plain.raw(), k, c, s, ctx_->stream());
    }
    kernels::cast(type, plain.raw(), DType::F32, dw.raw(), dw.numel(), ctx_->stream());
  }

  std::string key(Op op) const {
    std::ostringstream k;
    k << op_name(op) << " x" << conv_x_.to_string() << " y" << conv_y_.to_string() << " w" << filter_shape_.to_string()
      << " p";
    for (auto p : plan_.symmetric) k << p << ",";
    k << " s";
    for (auto s : spec_.stride) k << s << ",";
    k << " d";
    for (auto d : spec_.dilation) k << d << ",";
    k << " " << dtype_name(ctx_->activation_type()) << (wants_channels_last(*ctx_, in_) ? " nhwc" : " nchw")
      << (ctx_->deterministic() ? " det" : "");
    return k.str();
  }

  // Runs one of cuDNN's three convolution calls on (x, w, y) in cuDNN's naming; the output is y
  // (Forward), x (BackwardData) or w (BackwardFilter), overwritten.
  void run(Op op, const Tensor& x, const Tensor& w, const Tensor& y) {
    const CudaContext::Algorithm& a = algorithm(op, x, w, y);
    conv_.set_math(static_cast<cudnnMathType_t>(a.math));
    void* ws = a.workspace ? ctx_->workspace(a.workspace) : nullptr;
    const float one = 1.f, zero = 0.f;
    cudnnHandle_t h = ctx_->cudnn();
    switch (op) {
      case Op::Forward:
        FS_CHECK(cudnnConvolutionForward(h, &one, xd_.get(), x.raw(), wd_.get(), w.raw(), conv_.get(),
                                         static_cast<cudnnConvolutionFwdAlgo_t>(a.algorithm), ws, a.workspace, &zero,
                                         yd_.get(), const_cast<void*>(y.raw())));
        break;
      case Op::BackwardData:
        FS_CHECK(cudnnConvolutionBackwardData(h, &one, wd_.get(), w.raw(), yd_.get(), y.raw(), conv_.get(),
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algorithm), ws, a.workspace,
                                              &zero, xd_.get(), const_cast<void*>(x.raw())));
        break;
      case Op::BackwardFilter:
        FS_CHECK(cudnnConvolutionBackwardFilter(h, &one, xd_.get(), x.raw(), yd_.get(), y.raw(), conv_.get(),
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algorithm), ws,
                                                a.workspace, &zero, wd_.get(), const_cast<void*>(w.raw())));
        break;
    }
  }

  // The fastest algorithm cuDNN measures for this key (deterministic ones only when asked), found
  // once per process and shape: cudnnFind* runs the candidates on these very buffers.
  const CudaContext::Algorithm& algorithm(Op op, const Tensor& x, const Tensor& w, const Tensor& y) {
    auto& cache = ctx_->algorithm_cache();
    // Measured on these buffers, so valid for buffers aligned as these (some engines need 16 bytes).
    const auto align = [](const Tensor& t) { return std::to_string(alignment_of(t.raw(), 16)); };
    const std::string k = key(op) + " a" + align(x) + "," + align(w) + "," + align(y);
    if (auto it = cache.find(k); it != cache.end()) return it->second;
    conv_.set_math(ctx_->activation_type() == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH);
    const std::size_t limit = ctx_->workspace_limit();
    void* ws = ctx_->workspace(limit);
    cudnnHandle_t h = ctx_->cudnn();
    constexpr int kCandidates = 16;
    int returned = 0;
    CudaContext::Algorithm chosen;
    bool found = false;
    auto pick = [&](const auto* perf) {
      for (int i = 0; i < returned && !found; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > limit) continue;
        if (ctx_->deterministic() && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
        // fp32 stays fp32: FMA math even where cuDNN measured with its default (TF32 on Ampere+).
        const int math = ctx_->activation_type() == DType::F32 ? CUDNN_FMA_MATH : static_cast<int>(perf[i].mathType);
        chosen = {static_cast<int>(perf[i].algo), math, perf[i].memory};
        found = true;
      }
    };
    switch (op) {
      case Op::Forward: {
        cudnnConvolutionFwdAlgoPerf_t perf[kCandidates];
        FS_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, xd_.get(), x.raw(), wd_.get(), w.raw(), conv_.get(),
                                                        yd_.get(), const_cast<void*>(y.raw()), kCandidates, &returned,
                                                        perf, ws, limit));
        pick(perf);
        break;
      }
      case Op::BackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[kCandidates];
        FS_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, wd_.get(), w.raw(), yd_.get(), y.raw(), conv_.get(),
                                                             xd_.get(), const_cast<void*>(x.raw()), kCandidates,
                                                             &returned, perf, ws, limit));
        pick(perf);
        break;
      }
      case Op::BackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[kCandidates];
        FS_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xd_.get(), x.raw(), yd_.get(), y.raw(), conv_.get(),
                                                               wd_.get(), const_cast<void*>(w.raw()), kCandidates,
                                                               &returned, perf, ws, limit));
        pick(perf);
        break;
      }
    }
    if (!found)
      throw CudaError(std::string("cudnnFindConvolution: no ") + (ctx_->deterministic() ? "deterministic " : "") +
                      "algorithm for " + k + " fits " + std::to_string(limit >> 20) + " MiB of workspace");
    return cache.emplace(k, chosen).first->second;
  }

  ConvolutionSpec spec_;
  ops::SymmetricPadding plan_;
  Backend& backend_;
  std::shared_ptr<CudaContext> ctx_;
  ConvolutionDescriptor conv_;
  TensorDescriptor xd_, yd_;
  FilterDescriptor wd_;
  Shape filter_shape_, in_, out_, conv_x_, conv_y_;
  bool prepared_ = false;
  Tensor saved_;  // Train forward's cuDNN input for backward_weights (bordered input, or the transposed layer's input)
};

}  // namespace

std::unique_ptr<ConvolutionKernel> make_cudnn_convolution(const ConvolutionSpec& spec, Backend& backend,
                                                          std::shared_ptr<CudaContext> ctx) {
  return std::make_unique<CudnnConvolution>(spec, backend, std::move(ctx));
}

}  // namespace fanstore::trainer::cuda
