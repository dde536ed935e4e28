// Convolution and pooling specs: validation and output shapes (floor mode, per-side padding).
#include <functional>
#include <stdexcept>

#include "trainer/kernels.hpp"

namespace fanstore::trainer {
namespace {

void require_rank(const std::string& who, const char* field, const std::vector<std::int64_t>& v, std::size_t rank,
                  std::int64_t minimum) {
  if (v.size() != rank)
    throw std::invalid_argument(who + ": " + field + " has " + std::to_string(v.size()) + " entries, the kernel " +
                                std::to_string(rank) + " (all of kernel/stride/padding must be 2D or all 3D)");
  for (auto x : v)
    if (x < minimum)
      throw std::invalid_argument(who + ": " + field + " " + std::to_string(x) + " is below " +
                                  std::to_string(minimum));
}

// The checks a window spec (convolution or pooling) shares: rank 2 or 3, and one entry per
// spatial dimension in every per-dimension vector.
void validate_window(const std::string& who, const char* what, const std::vector<std::int64_t>& kernel,
                     const std::vector<std::int64_t>& stride, const std::vector<std::int64_t>& lo,
                     const std::vector<std::int64_t>& hi) {
  const auto r = kernel.size();
  if (r != 2 && r != 3) throw std::invalid_argument(who + ": " + what + " must be 2D or 3D");
  require_rank(who, "kernel", kernel, r, 1);
  require_rank(who, "stride", stride, r, 1);
  require_rank(who, "padding_lo", lo, r, 0);
  require_rank(who, "padding_hi", hi, r, 0);
}

Shape spatial_output(const Shape& in, int rank, std::int64_t channels, const std::string& who,
                     const std::function<std::int64_t(int, std::int64_t)>& extent) {
  if (in.rank() != rank + 2)
    throw std::invalid_argument(who + ": input " + in.to_string() + " must have rank " + std::to_string(rank + 2));
  Shape out = in;
  out[1] = channels;
  for (int i = 0; i < rank; ++i) {
    out[i + 2] = extent(i, in[i + 2]);
    if (out[i + 2] < 1) throw std::invalid_argument(who + ": input " + in.to_string() + " is too small");
  }
  return out;
}

}  // namespace

void ConvolutionSpec::validate(const std::string& who) const {
  validate_window(who, "kernel", kernel, stride, padding_lo, padding_hi);
  require_rank(who, "dilation", dilation, kernel.size(), 1);
  if (in_channels < 1 || out_channels < 1) throw std::invalid_argument(who + ": channel counts must be positive");
}

std::int64_t ConvolutionSpec::output_extent(int i, std::int64_t n) const {
  const auto d = static_cast<std::size_t>(i);
  const std::int64_t k = dilation[d] * (kernel[d] - 1) + 1;
  const std::int64_t pads = padding_lo[d] + padding_hi[d];
  if (transposed) return (n - 1) * stride[d] - pads + k;
  const std::int64_t span = n + pads - k;
  return span < 0 ? 0 : span / stride[d] + 1;
}

Shape ConvolutionSpec::output_shape(const Shape& input, const std::string& who) const {
  if (input.rank() >= 2 && input[1] != in_channels)
    throw std::invalid_argument(who + ": input " + input.to_string() + " has " + std::to_string(input[1]) +
                                " channels, expected " + std::to_string(in_channels));
  return spatial_output(input, spatial_rank(), out_channels, who,
                        [this](int i, std::int64_t n) { return output_extent(i, n); });
}

void PoolingSpec::validate(const std::string& who) const {
  validate_window(who, "pooling window", kernel, stride, padding_lo, padding_hi);
  for (std::size_t i = 0; i < kernel.size(); ++i)
    if (padding_lo[i] >= kernel[i] || padding_hi[i] >= kernel[i])
      throw std::invalid_argument(who +
                                  ": padding must be smaller than the window (a window of padding only has no value)");
}

std::int64_t PoolingSpec::output_extent(int i, std::int64_t n) const {
  const auto d = static_cast<std::size_t>(i);
  const std::int64_t span = n + padding_lo[d] + padding_hi[d] - kernel[d];
  return span < 0 ? 0 : span / stride[d] + 1;
}

Shape PoolingSpec::output_shape(const Shape& input, const std::string& who) const {
  if (input.rank() < 2) throw std::invalid_argument(who + ": input " + input.to_string() + " has no channels");
  return spatial_output(input, spatial_rank(), input[1], who,
                        [this](int i, std::int64_t n) { return output_extent(i, n); });
}

}  // namespace fanstore::trainer
