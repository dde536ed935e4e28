// copy_region: a spatial sub-box in global coordinates, expressed as the backend's copy_box.
#include <stdexcept>

#include "trainer/distributed_halo.hpp"

namespace fanstore::trainer {
namespace {

// The box of `region` inside a tensor (N, C, *covers): all of N and C, the region's offset in space.
Box box_within(const Tensor& t, const SpatialBox& covers, const SpatialBox& region) {
  Box b{{0, 0}, {t.shape()[0], t.shape()[1]}};
  for (std::size_t a = 0; a < region.axes.size(); ++a) {
    b.start.push_back(region.axes[a].lo - covers.axes.at(a).lo);
    b.extent.push_back(region.axes[a].size());
  }
  return b;
}

}  // namespace

void copy_region(Backend& backend, const Tensor& src, const SpatialBox& src_box, Tensor& dst, const SpatialBox& dst_box,
                 const SpatialBox& region, bool accumulate) {
  if (region.empty()) return;
  if (!src_box.contains(region) || !dst_box.contains(region))
    throw std::invalid_argument("copy_region: region " + region.to_string() + " is not inside " + src_box.to_string() +
                                " and " + dst_box.to_string());
  backend.copy_box(src, box_within(src, src_box, region), dst, box_within(dst, dst_box, region),
                   accumulate ? CopyMode::Accumulate : CopyMode::Overwrite);
}

}  // namespace fanstore::trainer
