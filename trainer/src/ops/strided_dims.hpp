// The dims and strides a strided-tensor library (cuDNN) gets for our tensors: plain row-major, or
// channels-last (n, *spatial, c). Host code, so the CPU tests check it against the layout kernels.
#pragma once

#include <vector>

#include "trainer/shape.hpp"

namespace fanstore::trainer::ops {

// Ranks 2 and 3 get trailing 1s to rank 4; ranks 4 and 5 stay. Another rank, or more elements than an int
// addresses, throws std::invalid_argument.
void strided_dims(const Shape& shape, bool channels_last, std::vector<int>& dims, std::vector<int>& strides);

}  // namespace fanstore::trainer::ops
