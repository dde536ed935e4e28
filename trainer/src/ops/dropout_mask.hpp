// The dropout mask as a pure function of (seed, step, global element index), shared by the CPU loop
// and the CUDA kernel so both draw the same bits.
#pragma once

#include <cstdint>

#include "fanstore/random.hpp"
#include "trainer/backend.hpp"

namespace fanstore::trainer::ops {

// Maps a local element's linear index to its linear index in the global tensor of a placement.
struct PlacementIndex {
  int rank = 0;
  bool identity = true;  // no placement: the global index is the local one
  std::int64_t local[8] = {}, global_stride[8] = {}, offset[8] = {};

  FANSTORE_HOST_DEVICE std::int64_t global_index(std::int64_t i) const {
    if (identity) return i;
    std::int64_t g = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const std::int64_t k = i % local[d];
      i /= local[d];
      g += (k + offset[d]) * global_stride[d];
    }
    return g;
  }
};

// Checks that the placement fits the local shape (same rank, inside the global shape); throws
// std::invalid_argument naming `op` otherwise.
PlacementIndex make_placement_index(const Shape& local, const GlobalPlacement& placement, const char* op);

// 1 / (1 - p) for a kept element, 0 for a dropped one.
FANSTORE_HOST_DEVICE inline float dropout_factor(std::uint64_t seed, std::uint64_t step, std::uint64_t global_index,
                                                 std::uint64_t threshold, float keep_scale) {
  const PhiloxBlock bits = random_block(seed, step, global_index);
  return bits.word[0] >= threshold ? keep_scale : 0.f;
}

}  // namespace fanstore::trainer::ops
