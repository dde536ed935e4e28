// Box copy plans: bounds checks and merging of dimensions that are contiguous on both sides.
#include "box_copy_plan.hpp"

#include <stdexcept>
#include <string>

namespace fanstore::trainer::ops {
namespace {

void check_box(const Shape& shape, const Box& box, const char* op, const char* side) {
  if (box.start.size() != shape.dims.size() || box.extent.size() != shape.dims.size())
    throw std::invalid_argument(std::string(op) + ": " + side + " box " + box.to_string() +
                                " does not have one entry per dimension of " + shape.to_string());
  for (std::size_t d = 0; d < shape.dims.size(); ++d)
    if (box.start[d] < 0 || box.extent[d] < 0 || box.start[d] + box.extent[d] > shape.dims[d])
      throw std::invalid_argument(std::string(op) + ": " + side + " box " + box.to_string() + " lies outside " +
                                  shape.to_string());
}

}  // namespace

BoxCopyPlan plan_box_copy(const Shape& src, const Box& src_box, const Shape& dst, const Box& dst_box, const char* op) {
  check_box(src, src_box, op, "source");
  check_box(dst, dst_box, op, "destination");
  if (src_box.extent != dst_box.extent)
    throw std::invalid_argument(std::string(op) + ": source box " + src_box.to_string() + " and destination box " +
                                dst_box.to_string() + " differ in extent");
  const int r = src.rank();
  if (r > kMaxBoxDims) throw std::invalid_argument(std::string(op) + ": rank " + std::to_string(r) + " is above 8");
  BoxCopyPlan plan;
  plan.count = src_box.numel();
  if (plan.count == 0) return plan;
  // Row-major strides, and the offsets of the boxes' first elements.
  std::int64_t ss[kMaxBoxDims], ds[kMaxBoxDims];
  std::int64_t s = 1, t = 1;
  for (int d = r - 1; d >= 0; --d) {
    ss[d] = s;
    ds[d] = t;
    s *= src[d];
    t *= dst[d];
    plan.src_offset += src_box.start[static_cast<std::size_t>(d)] * ss[d];
    plan.dst_offset += dst_box.start[static_cast<std::size_t>(d)] * ds[d];
  }
  // Walk from the innermost dimension out, dropping extent-1 dimensions and merging a dimension
  // into the one inside it when both sides step over exactly that inner run.
  std::int64_t ext[kMaxBoxDims], sst[kMaxBoxDims], dst_[kMaxBoxDims];
  int n = 0;  // dimensions collected, innermost first
  for (int d = r - 1; d >= 0; --d) {
    const std::int64_t e = src_box.extent[static_cast<std::size_t>(d)];
    if (e == 1) continue;
    if (n > 0 && ss[d] == sst[n - 1] * ext[n - 1] && ds[d] == dst_[n - 1] * ext[n - 1]) {
      ext[n - 1] *= e;
      continue;
    }
    ext[n] = e;
    sst[n] = ss[d];
    dst_[n] = ds[d];
    ++n;
  }
  // The innermost collected dimension must be contiguous for row copies; add a unit one if not.
  if (n == 0 || sst[0] != 1 || dst_[0] != 1) {
    for (int i = n; i > 0; --i) {
      ext[i] = ext[i - 1];
      sst[i] = sst[i - 1];
      dst_[i] = dst_[i - 1];
    }
    ext[0] = 1;
    sst[0] = dst_[0] = 1;
    ++n;
  }
  plan.rank = n;
  for (int i = 0; i < n; ++i) {  // back to outermost first
    plan.extent[i] = ext[n - 1 - i];
    plan.src_stride[i] = sst[n - 1 - i];
    plan.dst_stride[i] = dst_[n - 1 - i];
  }
  return plan;
}

}  // namespace fanstore::trainer::ops
