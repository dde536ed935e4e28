// Host element-wise ops, box copies and dropout (OpenMP over elements or rows; results do not
// depend on the thread count because no op reduces across threads).
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "../ops/box_copy_plan.hpp"
#include "../ops/dropout_mask.hpp"
#include "host_ops.hpp"

namespace fanstore::trainer::cpu {

void axpby(float a, const Tensor& x, float b, Tensor& y) {
  const auto n = static_cast<std::int64_t>(y.capacity());
  const float* in = x.data();
  float* out = y.data();
  if (b == 0.f) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) out[i] = a * in[i];
  } else {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) out[i] = a * in[i] + b * out[i];
  }
}

void fill(Tensor& t, float value) {
  float* p = t.data();
  for (std::size_t i = 0; i < t.capacity(); ++i) p[i] = value;
}

bool all_finite(const Tensor& t) {
  // A sum in double propagates NaN/Inf and cannot overflow for finite floats (at most 2^128 * n).
  const float* p = t.data();
  double sum = 0;
  for (std::size_t i = 0; i < t.capacity(); ++i) sum += p[i];
  return std::isfinite(sum);
}

void copy_box(const Tensor& src, const Box& src_box, Tensor& dst, const Box& dst_box, CopyMode mode) {
  if (!src.is_plain() || !dst.is_plain()) throw std::invalid_argument("copy_box: tensors must be plain");
  if (src.dtype() != dst.dtype()) throw std::invalid_argument("copy_box: source and destination dtypes differ");
  const ops::BoxCopyPlan plan = ops::plan_box_copy(src.shape(), src_box, dst.shape(), dst_box, "copy_box");
  if (plan.count == 0) return;
  const std::int64_t rows = plan.rows(), length = plan.row_length();
  const std::size_t element = dtype_size(src.dtype());
  const auto* in = static_cast<const char*>(src.raw());
  auto* out = static_cast<char*>(dst.raw());
  if (mode == CopyMode::Accumulate && src.dtype() != DType::F32)
    throw std::invalid_argument("copy_box: accumulate needs F32 tensors");
#pragma omp parallel for schedule(static) if (plan.count > 65536)
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t s = 0, d = 0;
    plan.row_offsets(r, s, d);
    if (mode == CopyMode::Overwrite) {
      std::memcpy(out + d * static_cast<std::int64_t>(element), in + s * static_cast<std::int64_t>(element),
                  static_cast<std::size_t>(length) * element);
    } else {
      const float* a = reinterpret_cast<const float*>(in) + s;
      float* b = reinterpret_cast<float*>(out) + d;
      for (std::int64_t i = 0; i < length; ++i) b[i] += a[i];
    }
  }
}

Tensor dropout(const Tensor& x, const DropoutMask& mask) {
  if (!x.is_plain()) throw std::invalid_argument("dropout: input must be plain");
  if (!(mask.p >= 0.f && mask.p < 1.f)) throw std::invalid_argument("dropout: probability must be in [0, 1)");
  const ops::PlacementIndex index = ops::make_placement_index(x.shape(), mask.placement, "dropout");
  const std::uint64_t threshold = probability_threshold(mask.p);
  const float keep_scale = 1.f / (1.f - mask.p);
  Tensor y = Tensor::zeros(x.shape());
  const float* in = x.data();
  float* out = y.data();
  const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 16384)
  for (std::int64_t i = 0; i < n; ++i) {
    const auto g = static_cast<std::uint64_t>(index.global_index(i));
    out[i] = in[i] * ops::dropout_factor(mask.seed, mask.step, g, threshold, keep_scale);
  }
  return y;
}

}  // namespace fanstore::trainer::cpu
