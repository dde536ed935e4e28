// Dropout placement checks: a spatial slab must lie inside the global tensor it claims to be part of.
#include "dropout_mask.hpp"

#include <stdexcept>
#include <string>

namespace fanstore::trainer::ops {

PlacementIndex make_placement_index(const Shape& local, const GlobalPlacement& placement, const char* op) {
  PlacementIndex index;
  index.rank = local.rank();
  if (placement.empty()) return index;
  const int r = local.rank();
  if (r > 8 || placement.global.rank() != r || static_cast<int>(placement.offset.size()) != r)
    throw std::invalid_argument(std::string(op) + ": placement in " + placement.global.to_string() +
                                " does not match the rank of " + local.to_string());
  index.identity = false;
  std::int64_t stride = 1;
  for (int d = r - 1; d >= 0; --d) {
    const auto u = static_cast<std::size_t>(d);
    if (placement.offset[u] < 0 || placement.offset[u] + local[d] > placement.global[d])
      throw std::invalid_argument(std::string(op) + ": slab " + local.to_string() + " at offset " +
                                  std::to_string(placement.offset[u]) + " of dimension " + std::to_string(d) +
                                  " lies outside the global " + placement.global.to_string());
    index.local[d] = local[d];
    index.offset[d] = placement.offset[u];
    index.global_stride[d] = stride;
    stride *= placement.global[d];
  }
  return index;
}

}  // namespace fanstore::trainer::ops
