// Batch normalisation on cuDNN (spatial mode; in training the persistent variant for half types in
// channels-last), batch statistics out in the layer's terms (mean, biased variance).
#include <stdexcept>
#include <utility>

#include "cuda/cuda_kernels.hpp"
#include "cuda/cuda_layout_helpers.hpp"
#include "cuda/cudnn_descriptors.hpp"

namespace fanstore::trainer::cuda {
namespace {

class CudnnBatchNorm final : public BatchNormKernel {
 public:
  CudnnBatchNorm(float epsilon, Backend& backend, std::shared_ptr<CudaContext> ctx)
      : epsilon_(epsilon), backend_(backend), ctx_(std::move(ctx)) {}

  Tensor forward(const Tensor& x_any, const Tensor& gamma, const Tensor& beta, Tensor& mean, Tensor& variance,
                 Mode mode) override {
    const Tensor x = prepared(backend_, *ctx_, x_any);
    prepare(x);
    Tensor y = activation_zeros(backend_, *ctx_, x.shape());
    const float one = 1.f, zero = 0.f;
    if (mode == Mode::Train) {
      if (!inv_std_.defined() || inv_std_.numel() != gamma.numel()) inv_std_ = backend_.zeros(gamma.shape());
      // No running averages here (the layer updates them, PyTorch's way); cuDNN saves the batch
      // mean and 1/sqrt(var + eps), which backward reuses.
      FS_CHECK(cudnnBatchNormalizationForwardTraining(ctx_->cudnn(), bn_mode_, &one, &zero, xd_.get(), x.raw(),
                                                      xd_.get(), y.raw(), bnd_.get(), gamma.raw(), beta.raw(), 1.0,
                                                      nullptr, nullptr, epsilon_, mean.raw(), inv_std_.raw()));
      kernels::variance_from_inv_std(inv_std_.data(), variance.data(), variance.numel(), epsilon_, ctx_->stream());
      x_ = x;
      mean_ = mean;
    } else {
      // Plain spatial mode: the persistent variant is documented for training and backward only.
      FS_CHECK(cudnnBatchNormalizationForwardInference(ctx_->cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd_.get(),
                                                       x.raw(), xd_.get(), y.raw(), bnd_.get(), gamma.raw(), beta.raw(),
                                                       mean.raw(), variance.raw(), epsilon_));
      x_ = mean_ = Tensor();  // inference keeps nothing (freed stream-ordered, after the kernel above)
    }
    return y;
  }

  Tensor backward(const Tensor& dy_any, const Tensor& gamma, Tensor& dgamma, Tensor& dbeta) override {
    if (!x_.defined()) throw std::logic_error("batch norm: backward needs a forward in Mode::Train first");
    const Tensor x = std::move(x_);  // it serves one backward (freed stream-ordered, after the kernels below)
    const Tensor dy = prepared(backend_, *ctx_, dy_any);
    Tensor dx = activation_zeros(backend_, *ctx_, x.shape());
    const float one = 1.f, zero = 0.f;
    FS_CHECK(cudnnBatchNormalizationBackward(ctx_->cudnn(), bn_mode_, &one, &zero, &one, &zero, xd_.get(), x.raw(),
                                             xd_.get(), dy.raw(), xd_.get(), dx.raw(), bnd_.get(), gamma.raw(),
                                             dgamma.raw(), dbeta.raw(), epsilon_, mean_.raw(), inv_std_.raw()));
    return dx;
  }

 private:
  void prepare(const Tensor& x) {
    if (ready_ && x.shape() == shape_ && x.dtype() == type_) return;
    shape_ = x.shape();
    type_ = x.dtype();
    const bool cl = is_channels_last(x);
    xd_.set(shape_, type_, cl);
    bn_mode_ = cl && type_ != DType::F32 ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
    FS_CHECK(cudnnDeriveBNTensorDescriptor(bnd_.get(), xd_.get(), bn_mode_));
    ready_ = true;
  }

  float epsilon_;
  Backend& backend_;
  std::shared_ptr<CudaContext> ctx_;
  TensorDescriptor xd_, bnd_;
  cudnnBatchNormMode_t bn_mode_ = CUDNN_BATCHNORM_SPATIAL;
  Shape shape_;
  DType type_ = DType::F32;
  bool ready_ = false;
  Tensor x_, mean_, inv_std_;  // saved by a training forward for its backward
};

}  // namespace

std::unique_ptr<BatchNormKernel> make_cudnn_batch_norm(float epsilon, Backend& backend,
                                                       std::shared_ptr<CudaContext> ctx) {
  return std::make_unique<CudnnBatchNorm>(epsilon, backend, std::move(ctx));
}

}  // namespace fanstore::trainer::cuda
