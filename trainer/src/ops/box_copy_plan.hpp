// The plan of a box copy (Backend::copy_box): validated, with dimensions merged where both sides are
// contiguous, as strides that a CPU loop and a CUDA kernel execute alike.
#pragma once

#include <cstdint>

#include "fanstore/random.hpp"  // FANSTORE_HOST_DEVICE
#include "trainer/backend.hpp"

namespace fanstore::trainer::ops {

inline constexpr int kMaxBoxDims = 8;

struct BoxCopyPlan {
  int rank = 0;                           // dimensions left after merging (>= 1 unless empty)
  std::int64_t extent[kMaxBoxDims] = {};  // outermost first; extent[rank - 1] is contiguous on both sides
  std::int64_t src_stride[kMaxBoxDims] = {}, dst_stride[kMaxBoxDims] = {};  // in elements
  std::int64_t src_offset = 0, dst_offset = 0;  // element offsets of the boxes' first elements
  std::int64_t count = 0;                       // elements copied

  FANSTORE_HOST_DEVICE std::int64_t rows() const { return rank == 0 ? 0 : count / extent[rank - 1]; }
  FANSTORE_HOST_DEVICE std::int64_t row_length() const { return rank == 0 ? 0 : extent[rank - 1]; }
  // Element offsets of the first element of row r (all but the innermost dimension) on each side.
  FANSTORE_HOST_DEVICE void row_offsets(std::int64_t r, std::int64_t& src, std::int64_t& dst) const {
    src = src_offset;
    dst = dst_offset;
    for (int d = rank - 2; d >= 0; --d) {
      const std::int64_t i = r % extent[d];
      r /= extent[d];
      src += i * src_stride[d];
      dst += i * dst_stride[d];
    }
  }
};

// Checks ranks, extents and bounds (throws std::invalid_argument naming `op` and the boxes) and
// builds the plan. Both tensors are plain (row-major) of the given shapes.
BoxCopyPlan plan_box_copy(const Shape& src, const Box& src_box, const Shape& dst, const Box& dst_box, const char* op);

}  // namespace fanstore::trainer::ops
