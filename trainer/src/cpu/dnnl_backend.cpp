// The CPU backend: one oneDNN engine and stream, kernel factories, and layout conversion at boundaries.
#include <omp.h>

#include "dnnl_common.hpp"

namespace fanstore::trainer {
namespace cpu {
namespace {

class DnnlBackend final : public Backend {
 public:
  explicit DnnlBackend(const CpuBackendOptions& options) {
    // Fixed thread counts make results reproducible run to run (oneDNN's reductions split by thread).
    if (options.threads > 0) omp_set_num_threads(options.threads);
  }

  std::string name() const override { return "cpu-onednn"; }

  Tensor to_plain(const Tensor& t) override {
    if (t.is_plain()) return t;
    Tensor out = Tensor::zeros(t.shape());
    auto src = memory_of(t, ctx_.engine), dst = memory_of(out, ctx_.engine);
    dnnl::reorder(src, dst).execute(ctx_.stream, src, dst);
    return out;
  }

  Tensor to_layout_of(const Tensor& t, const Tensor& like) override {
    if (t.same_layout(like)) return t;
    Tensor out = Tensor::with_layout(like.shape(), like.layout());
    auto src = memory_of(t, ctx_.engine);
    auto dst = memory_of(out, ctx_.engine);
    dnnl::reorder(src, dst).execute(ctx_.stream, src, dst);
    return out;
  }

  void synchronize() override { ctx_.stream.wait(); }

  std::unique_ptr<ConvolutionKernel> make_convolution(const ConvolutionSpec& spec) override {
    return make_dnnl_convolution(spec, ctx_);
  }
  std::unique_ptr<PoolingKernel> make_pooling(const PoolingSpec& spec) override { return make_dnnl_pooling(spec, ctx_); }
  std::unique_ptr<BatchNormKernel> make_batch_norm(float epsilon) override {
    return make_dnnl_batch_norm(epsilon, ctx_);
  }
  std::unique_ptr<EltwiseKernel> make_eltwise(const EltwiseSpec& spec) override { return make_dnnl_eltwise(spec, ctx_); }
  std::unique_ptr<InnerProductKernel> make_inner_product(bool bias) override {
    return make_dnnl_inner_product(bias, ctx_);
  }

 private:
  DnnlContext ctx_;
};

}  // namespace
}  // namespace cpu

std::shared_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_shared<cpu::DnnlBackend>(options);
}

}  // namespace fanstore::trainer
