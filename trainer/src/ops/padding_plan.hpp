// How a backend whose primitives take one padding per dimension (cuDNN's legacy convolution and
// pooling descriptors) runs per-side padding: the primitive pads min(lo, hi) on both sides, and the
// rest is an explicit border: copied around the input before a convolution or pooling, or cropped
// off the output of a transposed convolution. Host code, tested on the CPU backend by running the
// plan with symmetric primitives and comparing with the per-side result.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/backend.hpp"

namespace fanstore::trainer::ops {

struct SymmetricPadding {
  std::vector<std::int64_t> symmetric;           // per spatial dimension: what the primitive pads
  std::vector<std::int64_t> extra_lo, extra_hi;  // per spatial dimension: the explicit border left over

  bool needs_border() const;
  // Input side (convolution, pooling): the input grown by the border, and where the input sits in
  // it (the box to copy into a tensor filled with the padding value; backward crops dx with it).
  Shape bordered(const Shape& input) const;
  Box interior(const Shape& input) const;
  // Output side (transposed convolution): the output the primitive computes with `symmetric`
  // padding for a wanted output shape, and the box of the wanted output in it.
  Shape uncropped(const Shape& output) const;
  Box crop(const Shape& output) const;
};

SymmetricPadding plan_symmetric_padding(const std::vector<std::int64_t>& lo, const std::vector<std::int64_t>& hi);

// The spec a symmetric-padding primitive runs for a per-side spec (padding_lo = padding_hi = min).
ConvolutionSpec symmetric_spec(const ConvolutionSpec& spec);
PoolingSpec symmetric_spec(const PoolingSpec& spec);

}  // namespace fanstore::trainer::ops
