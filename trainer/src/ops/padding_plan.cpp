// Symmetric-padding plans: the primitive's padding and the explicit border around it.
#include "padding_plan.hpp"

#include <algorithm>
#include <stdexcept>

namespace fanstore::trainer::ops {

SymmetricPadding plan_symmetric_padding(const std::vector<std::int64_t>& lo, const std::vector<std::int64_t>& hi) {
  if (lo.size() != hi.size()) throw std::invalid_argument("padding plan: padding_lo and padding_hi differ in rank");
  SymmetricPadding p;
  for (std::size_t i = 0; i < lo.size(); ++i) {
    const std::int64_t s = std::min(lo[i], hi[i]);
    p.symmetric.push_back(s);
    p.extra_lo.push_back(lo[i] - s);
    p.extra_hi.push_back(hi[i] - s);
  }
  return p;
}

bool SymmetricPadding::needs_border() const {
  for (std::size_t i = 0; i < symmetric.size(); ++i)
    if (extra_lo[i] || extra_hi[i]) return true;
  return false;
}

Shape SymmetricPadding::bordered(const Shape& input) const {
  Shape s = input;
  for (std::size_t i = 0; i < symmetric.size(); ++i) s[static_cast<int>(i) + 2] += extra_lo[i] + extra_hi[i];
  return s;
}

Box SymmetricPadding::interior(const Shape& input) const {
  Box b = Box::whole(input);
  for (std::size_t i = 0; i < symmetric.size(); ++i) b.start[i + 2] = extra_lo[i];
  return b;
}

Shape SymmetricPadding::uncropped(const Shape& output) const { return bordered(output); }

Box SymmetricPadding::crop(const Shape& output) const { return interior(output); }

ConvolutionSpec symmetric_spec(const ConvolutionSpec& spec) {
  ConvolutionSpec s = spec;
  const auto p = plan_symmetric_padding(spec.padding_lo, spec.padding_hi);
  s.padding_lo = s.padding_hi = p.symmetric;
  return s;
}

PoolingSpec symmetric_spec(const PoolingSpec& spec) {
  PoolingSpec s = spec;
  const auto p = plan_symmetric_padding(spec.padding_lo, spec.padding_hi);
  s.padding_lo = s.padding_hi = p.symmetric;
  return s;
}

}  // namespace fanstore::trainer::ops
