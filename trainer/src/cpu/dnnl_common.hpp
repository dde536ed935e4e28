// Shared oneDNN plumbing for the CPU backend: the engine/stream, layouts, memory wrapping, reorders.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "trainer/backend.hpp"

namespace fanstore::trainer::cpu {

// A oneDNN memory descriptor as a Tensor layout (only set when it differs from plain).
class DnnlLayout final : public NativeLayout {
 public:
  explicit DnnlLayout(dnnl::memory::desc md) : md_(std::move(md)) {}
  const dnnl::memory::desc& md() const { return md_; }
  std::size_t element_capacity() const override { return md_.get_size() / sizeof(float); }
  bool same_as(const NativeLayout& other) const override;
  std::string describe() const override;

 private:
  dnnl::memory::desc md_;
};

// The single engine and stream every CPU kernel uses.
struct DnnlContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};

  // Room for what a primitive needs only while it runs (weights in its layout, a weight gradient before
  // its reorder into the arena). CPU primitives run synchronously, one at a time, so the kernels share
  // it instead of each keeping copies of its weights. Valid until the next call.
  float* scratch(std::size_t bytes) {
    if (scratch_.size() * sizeof(float) < bytes) scratch_.resize((bytes + sizeof(float) - 1) / sizeof(float));
    return scratch_.data();
  }

 private:
  std::vector<float> scratch_;
};

dnnl::memory::dims to_dims(const std::vector<std::int64_t>& v);
dnnl::memory::dims to_dims(const Shape& s);
// Row-major descriptor for a shape of rank 1, 2, 4 or 5.
dnnl::memory::desc plain_desc(const Shape& shape);
// Same dims, format chosen by the primitive (format_tag::any).
dnnl::memory::desc any_desc(const Shape& shape);
// The descriptor that describes how t is stored.
dnnl::memory::desc desc_of(const Tensor& t);
// Wraps t's storage (no copy).
dnnl::memory memory_of(const Tensor& t, const dnnl::engine& engine);
// A zeroed tensor laid out as md (plain when md is the plain layout of shape).
Tensor tensor_for(const Shape& shape, const dnnl::memory::desc& md);

// A reorder primitive cached for one (source layout, destination layout) pair: layers call it every
// step with the same pair, so the primitive is built once.
class CachedReorder {
 public:
  // t converted to `target` (t itself when already there).
  Tensor to(const Tensor& t, const dnnl::memory::desc& target, DnnlContext& ctx);
  // Copies src into the existing storage of dst (which is laid out as dst_md).
  void into(const Tensor& src, const dnnl::memory::desc& dst_md, float* dst, DnnlContext& ctx);
  // Raw memories, for parameters whose user layout is not the plain layout of a Tensor shape.
  void execute(const dnnl::memory& src, const dnnl::memory& dst, DnnlContext& ctx);

 private:
  dnnl::reorder& get(const dnnl::memory::desc& from, const dnnl::memory::desc& to, DnnlContext& ctx);
  dnnl::memory::desc from_, to_;
  std::optional<dnnl::reorder> reorder_;
};

std::unique_ptr<ConvolutionKernel> make_dnnl_convolution(const ConvolutionSpec& spec, DnnlContext& ctx);
std::unique_ptr<PoolingKernel> make_dnnl_pooling(const PoolingSpec& spec, DnnlContext& ctx);
std::unique_ptr<BatchNormKernel> make_dnnl_batch_norm(float epsilon, DnnlContext& ctx);
std::unique_ptr<EltwiseKernel> make_dnnl_eltwise(const EltwiseSpec& spec, DnnlContext& ctx);
std::unique_ptr<InnerProductKernel> make_dnnl_inner_product(bool bias, DnnlContext& ctx);

}  // namespace fanstore::trainer::cpu
