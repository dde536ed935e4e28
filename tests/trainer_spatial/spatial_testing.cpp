// Test helpers: gather a spatially split tensor by summing disjoint pieces.
#include "spatial_testing.hpp"

#include "trainer/distributed_halo.hpp"

namespace fanstore::trainer::testing {

Tensor gather_boxes(Communicator& comm, const Tensor& piece, const SpatialBox& box, const SpatialBox& whole) {
  Shape s{piece.shape()[0], piece.shape()[1]};
  for (auto e : whole.extents()) s.dims.push_back(e);
  Tensor all = Tensor::zeros(s);
  auto backend = make_cpu_backend({1});
  copy_region(*backend, piece, box, all, whole, box, false);
  comm.sum(all.data(), static_cast<std::size_t>(all.numel()));
  return all;
}

Tensor slab_of(const Tensor& t, const SpatialBox& whole, const SpatialBox& box) {
  Shape s{t.shape()[0], t.shape()[1]};
  for (auto e : box.extents()) s.dims.push_back(e);
  Tensor part = Tensor::zeros(s);
  auto backend = make_cpu_backend({1});
  copy_region(*backend, t, whole, part, box, box, false);
  return part;
}

}  // namespace fanstore::trainer::testing
