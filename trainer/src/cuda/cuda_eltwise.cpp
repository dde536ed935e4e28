// Activations (ReLU, LeakyReLU, tanh, scale) as our element-wise kernels, in the input's own type
// and layout (cuDNN has no LeakyReLU or scale).
#include "cuda/cuda_kernels.hpp"
#include "cuda/cuda_layout_helpers.hpp"

namespace fanstore::trainer::cuda {
namespace {

class CudaEltwise final : public EltwiseKernel {
 public:
  CudaEltwise(const EltwiseSpec& spec, Backend& backend, std::shared_ptr<CudaContext> ctx)
      : spec_(spec), backend_(backend), ctx_(std::move(ctx)) {}

  Tensor forward(const Tensor& x) override {
    Tensor y = backend_.zeros_like(x);
    kernels::eltwise_forward(spec_.kind, spec_.alpha, x.dtype(), x.raw(), y.raw(),
                             static_cast<std::int64_t>(x.capacity()), ctx_->stream());
    return y;
  }

  Tensor backward(Tensor dy_any, const Tensor& y) override {
    const Tensor dy = backend_.to_layout_of(dy_any, y);
    dy_any = Tensor();
    // Each element's dx reads only its own dy and y: in place when nobody else reads dy.
    Tensor dx = dy.sole_owner() && dy.same_layout(y) ? dy : backend_.zeros_like(y);
    kernels::eltwise_backward(spec_.kind, spec_.alpha, y.dtype(), dy.raw(), y.raw(), dx.raw(),
                              static_cast<std::int64_t>(y.capacity()), ctx_->stream());
    return dx;
  }

 private:
  EltwiseSpec spec_;
  Backend& backend_;
  std::shared_ptr<CudaContext> ctx_;
};

}  // namespace

std::unique_ptr<EltwiseKernel> make_cuda_eltwise(const EltwiseSpec& spec, Backend& backend,
                                                 std::shared_ptr<CudaContext> ctx) {
  return std::make_unique<CudaEltwise>(spec, backend, std::move(ctx));
}

}  // namespace fanstore::trainer::cuda
