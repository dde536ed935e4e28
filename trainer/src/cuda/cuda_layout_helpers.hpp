// Conversions the CUDA layer kernels share: into the backend's activation type and preferred
// layout, and the per-side padding border (done in plain layout, where box copies work).
#pragma once

#include <cstdint>

#include "cuda/cuda_context.hpp"
#include "cuda/cuda_kernels.hpp"
#include "cuda/cuda_layers.hpp"
#include "ops/padding_plan.hpp"
#include "trainer/backend.hpp"

namespace fanstore::trainer::cuda {

// The largest power of two up to `most` that divides p's address: cuBLASLt and cuDNN choose kernels for
// operands aligned so, and parameter views sit at any float offset in their arena.
inline std::uint32_t alignment_of(const void* p, std::uint32_t most) {
  std::uint32_t a = most;
  while (a > 1 && reinterpret_cast<std::uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// Rank 4/5 activations go channels-last when the context prefers it; others stay plain.
inline bool wants_channels_last(const CudaContext& ctx, const Shape& s) {
  return ctx.channels_last() && (s.rank() == 4 || s.rank() == 5);
}

// A zeroed tensor of `shape` in the activation type and preferred layout.
inline Tensor activation_zeros(Backend& backend, const CudaContext& ctx, const Shape& shape) {
  const DType type = ctx.activation_type();
  if (!wants_channels_last(ctx, shape)) return backend.zeros(shape, type);
  return Tensor::on_storage(backend.allocate(static_cast<std::size_t>(shape.numel()) * dtype_size(type)), shape, type,
                            std::make_shared<ChannelsLast>(static_cast<std::size_t>(shape.numel())));
}

// t in the activation type and the preferred layout for its shape.
inline Tensor prepared(Backend& backend, const CudaContext& ctx, const Tensor& t) {
  Tensor x = backend.cast(t, ctx.activation_type());
  if (!wants_channels_last(ctx, x.shape())) return backend.to_plain(x);
  if (is_channels_last(x)) return x;
  Tensor out = activation_zeros(backend, ctx, x.shape());
  const Shape& s = x.shape();
  kernels::to_channels_last(x.dtype(), x.raw(), out.raw(), s[0], s[1], s.spatial_size(), ctx.stream());
  return out;
}

// x surrounded by the plan's border filled with `fill`, in the preferred layout.
inline Tensor bordered(Backend& backend, const CudaContext& ctx, const Tensor& x, const ops::SymmetricPadding& plan,
                       float fill) {
  const Tensor plain = backend.to_plain(x);
  Tensor out = backend.zeros(plan.bordered(plain.shape()), plain.dtype());
  if (fill != 0.f) backend.fill(out, fill);
  backend.copy_box(plain, Box::whole(plain.shape()), out, plan.interior(plain.shape()), CopyMode::Overwrite);
  return prepared(backend, ctx, out);
}

// The box of t (any layout) as a tensor in the preferred layout.
inline Tensor cropped(Backend& backend, const CudaContext& ctx, const Tensor& t, const Box& box) {
  const Tensor plain = backend.to_plain(t);
  Tensor out = backend.zeros(Shape(box.extent), plain.dtype());
  backend.copy_box(plain, box, out, Box::whole(out.shape()), CopyMode::Overwrite);
  return prepared(backend, ctx, out);
}

}  // namespace fanstore::trainer::cuda
