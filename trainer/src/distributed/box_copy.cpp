// Host copy of a spatial sub-box between two (N, C, *box) tensors, optionally adding.
#include <algorithm>
#include <stdexcept>

#include "trainer/distributed_halo.hpp"

namespace fanstore::trainer {

void copy_region(const Tensor& src, const SpatialBox& src_box, Tensor& dst, const SpatialBox& dst_box, const SpatialBox& region, bool accumulate) {
  if (region.empty()) return;
  if (!src.is_plain() || !dst.is_plain()) throw std::invalid_argument("copy_region: tensors must be plain");
  if (!src_box.contains(region) || !dst_box.contains(region))
    throw std::invalid_argument("copy_region: region " + region.to_string() + " is not inside " + src_box.to_string() +
                                " and " + dst_box.to_string());
  const std::int64_t planes = src.shape()[0] * src.shape()[1];
  if (dst.shape()[0] * dst.shape()[1] != planes) throw std::invalid_argument("copy_region: batch/channels differ");
  // Pad to three axes (a 2D box is one deep).
  auto axes3 = [](const SpatialBox& b) {
    std::vector<Range> a(3 - b.axes.size(), Range{0, 1});
    a.insert(a.end(), b.axes.begin(), b.axes.end());
    return a;
  };
  const auto s = axes3(src_box), d = axes3(dst_box), r = axes3(region);
  const std::int64_t s_plane = s[0].size() * s[1].size() * s[2].size(), d_plane = d[0].size() * d[1].size() * d[2].size();
  const std::int64_t run = r[2].size();
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t z = r[0].lo; z < r[0].hi; ++z)
      for (std::int64_t y = r[1].lo; y < r[1].hi; ++y) {
        const float* from = src.data() + p * s_plane + ((z - s[0].lo) * s[1].size() + (y - s[1].lo)) * s[2].size() + (r[2].lo - s[2].lo);
        float* to = dst.data() + p * d_plane + ((z - d[0].lo) * d[1].size() + (y - d[1].lo)) * d[2].size() + (r[2].lo - d[2].lo);
        if (accumulate)
          for (std::int64_t x = 0; x < run; ++x) to[x] += from[x];
        else
          std::copy(from, from + run, to);
      }
}

}  // namespace fanstore::trainer
