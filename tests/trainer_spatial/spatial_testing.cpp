// Test helpers: gather a spatially split tensor by summing disjoint pieces.
#include "spatial_testing.hpp"

#include "trainer/distributed_halo.hpp"

namespace fanstore::trainer::testing {

Tensor gather_boxes(Communicator& comm, const Tensor& piece, const SpatialBox& box, const SpatialBox& whole) {
  Shape s{piece.shape()[0], piece.shape()[1]};
  for (auto e : whole.extents()) s.dims.push_back(e);
  Tensor all = Tensor::zeros(s);
  copy_region(piece, box, all, whole, box, false);
  comm.sum(all.data(), static_cast<std::size_t>(all.numel()));
  return all;
}

}  // namespace fanstore::trainer::testing
