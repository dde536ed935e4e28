// Helpers of the spatial tests: the world communicator of the MPI test binaries, and gathering a
// spatially split tensor so it can be compared with the serial run.
#pragma once

#include "trainer/distributed.hpp"
#include "trainer/distributed_grid.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer::testing {

Communicator& world();

// Every rank's (N, C, *box) piece (plain, host) of a tensor (N, C, *whole) summed into the whole
// tensor on every rank (pieces are disjoint, so the sum is an exact gather).
Tensor gather_boxes(Communicator& comm, const Tensor& piece, const SpatialBox& box, const SpatialBox& whole);

// The (N, C, *box) part of a plain host tensor (N, C, *whole).
Tensor slab_of(const Tensor& t, const SpatialBox& whole, const SpatialBox& box);

}  // namespace fanstore::trainer::testing
