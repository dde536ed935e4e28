// Max and average pooling (2D/3D) on cuDNN; per-side padding through the symmetric plan with a
// -inf (max) or zero (average, which counts padding) border.
#include <limits>
#include <stdexcept>

#include "cuda/cuda_layout_helpers.hpp"
#include "cuda/cudnn_descriptors.hpp"

namespace fanstore::trainer::cuda {
namespace {

class CudnnPooling final : public PoolingKernel {
 public:
  CudnnPooling(const PoolingSpec& spec, Backend& backend, std::shared_ptr<CudaContext> ctx)
      : spec_(spec),
        plan_(ops::plan_symmetric_padding(spec.padding_lo, spec.padding_hi)),
        backend_(backend),
        ctx_(std::move(ctx)) {
    spec_.validate("pooling");
    // Deterministic max: backward routes each gradient to one input, the same one every time.
    pool_.set(
        spec_.kind == PoolingKind::Max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
        spec_.kernel, plan_.symmetric, spec_.stride);
  }

  Tensor forward(const Tensor& x_any, Mode mode) override {
    const Tensor x = prepared(backend_, *ctx_, x_any);
    if (x.shape() != in_ || !ready_) {
      in_ = x.shape();
      out_ = spec_.output_shape(in_, "pooling");
      const bool cl = wants_channels_last(*ctx_, in_);
      xd_.set(plan_.bordered(in_), x.dtype(), cl);
      yd_.set(out_, x.dtype(), cl);
      ready_ = true;
    }
    const float fill = spec_.kind == PoolingKind::Max ? -std::numeric_limits<float>::infinity() : 0.f;
    Tensor xin = plan_.needs_border() ? bordered(backend_, *ctx_, x, plan_, fill) : x;
    Tensor y = activation_zeros(backend_, *ctx_, out_);
    const float one = 1.f, zero = 0.f;
    FS_CHECK(cudnnPoolingForward(ctx_->cudnn(), pool_.get(), &one, xd_.get(), xin.raw(), &zero, yd_.get(), y.raw()));
    // cuDNN's backward needs the forward's input and output (it finds the maxima again).
    if (mode == Mode::Train) {
      x_ = xin;
      y_ = y;
    } else {
      x_ = y_ = Tensor();
    }
    return y;
  }

  Tensor backward(const Tensor& dy_any) override {
    if (!x_.defined()) throw std::logic_error("pooling: backward needs a forward in Mode::Train first");
    const Tensor dy = prepared(backend_, *ctx_, dy_any);
    Tensor dx = activation_zeros(backend_, *ctx_, plan_.bordered(in_));
    const float one = 1.f, zero = 0.f;
    FS_CHECK(cudnnPoolingBackward(ctx_->cudnn(), pool_.get(), &one, yd_.get(), y_.raw(), yd_.get(), dy.raw(), xd_.get(),
                                  x_.raw(), &zero, xd_.get(), dx.raw()));
    x_ = y_ = Tensor();  // they serve one backward (freed stream-ordered, after the kernel above)
    return plan_.needs_border() ? cropped(backend_, *ctx_, dx, plan_.interior(in_)) : dx;
  }

 private:
  PoolingSpec spec_;
  ops::SymmetricPadding plan_;
  Backend& backend_;
  std::shared_ptr<CudaContext> ctx_;
  PoolingDescriptor pool_;
  TensorDescriptor xd_, yd_;
  Shape in_, out_;
  bool ready_ = false;
  Tensor x_, y_;
};

}  // namespace

std::unique_ptr<PoolingKernel> make_cudnn_pooling(const PoolingSpec& spec, Backend& backend,
                                                  std::shared_ptr<CudaContext> ctx) {
  return std::make_unique<CudnnPooling>(spec, backend, std::move(ctx));
}

}  // namespace fanstore::trainer::cuda
