// Shared oneDNN plumbing for the CPU backend: layouts, memory wrapping and cached reorders.
#include "dnnl_common.hpp"

#include <stdexcept>

namespace fanstore::trainer::cpu {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

bool DnnlLayout::same_as(const NativeLayout& other) const {
  auto* o = dynamic_cast<const DnnlLayout*>(&other);
  return o && o->md_ == md_;
}

std::string DnnlLayout::describe() const { return "onednn-native(" + std::to_string(md_.get_size()) + " bytes)"; }

dnnl::memory::dims to_dims(const std::vector<std::int64_t>& v) { return dnnl::memory::dims(v.begin(), v.end()); }
dnnl::memory::dims to_dims(const Shape& s) { return to_dims(s.dims); }

dnnl::memory::desc plain_desc(const Shape& shape) {
  switch (shape.rank()) {
    case 1: return {to_dims(shape), dt::f32, tag::a};
    case 2: return {to_dims(shape), dt::f32, tag::ab};
    case 3: return {to_dims(shape), dt::f32, tag::abc};
    case 4: return {to_dims(shape), dt::f32, tag::abcd};
    case 5: return {to_dims(shape), dt::f32, tag::abcde};
    default: throw std::invalid_argument("no plain oneDNN layout for shape " + shape.to_string());
  }
}

dnnl::memory::desc any_desc(const Shape& shape) { return {to_dims(shape), dt::f32, tag::any}; }

dnnl::memory::desc desc_of(const Tensor& t) {
  if (t.is_plain()) return plain_desc(t.shape());
  auto* layout = dynamic_cast<const DnnlLayout*>(t.layout().get());
  if (!layout) throw std::logic_error("tensor in layout " + t.layout()->describe() + " given to the CPU backend");
  return layout->md();
}

dnnl::memory memory_of(const Tensor& t, const dnnl::engine& engine) {
  return dnnl::memory(desc_of(t), engine, const_cast<float*>(t.data()));
}

Tensor tensor_for(const Shape& shape, const dnnl::memory::desc& md) {
  if (md == plain_desc(shape)) return Tensor::zeros(shape);
  return Tensor::with_layout(shape, std::make_shared<DnnlLayout>(md));
}

dnnl::reorder& CachedReorder::get(const dnnl::memory::desc& from, const dnnl::memory::desc& to, DnnlContext& ctx) {
  if (!reorder_ || !(from == from_) || !(to == to_)) {
    from_ = from;
    to_ = to;
    reorder_.emplace(dnnl::reorder::primitive_desc(ctx.engine, from, ctx.engine, to));
  }
  return *reorder_;
}

Tensor CachedReorder::to(const Tensor& t, const dnnl::memory::desc& target, DnnlContext& ctx) {
  auto from = desc_of(t);
  if (from == target) return t;
  Tensor out = tensor_for(t.shape(), target);
  auto src = memory_of(t, ctx.engine), dst = memory_of(out, ctx.engine);
  get(from, target, ctx).execute(ctx.stream, src, dst);
  return out;
}

void CachedReorder::into(const Tensor& src, const dnnl::memory::desc& dst_md, float* dst, DnnlContext& ctx) {
  auto from = desc_of(src);
  dnnl::memory dst_mem(dst_md, ctx.engine, dst);
  auto src_mem = memory_of(src, ctx.engine);
  get(from, dst_md, ctx).execute(ctx.stream, src_mem, dst_mem);
}

void CachedReorder::execute(const dnnl::memory& src, const dnnl::memory& dst, DnnlContext& ctx) {
  // dnnl::reorder::execute takes non-const handles; copies of a dnnl::memory share the buffer.
  dnnl::memory s = src, d = dst;
  get(src.get_desc(), dst.get_desc(), ctx).execute(ctx.stream, s, d);
}

}  // namespace fanstore::trainer::cpu
