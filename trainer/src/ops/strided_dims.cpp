// Dims and strides of plain and channels-last tensors.
#include "strided_dims.hpp"

#include <limits>
#include <stdexcept>
#include <string>

namespace fanstore::trainer::ops {

void strided_dims(const Shape& shape, bool channels_last, std::vector<int>& dims, std::vector<int>& strides) {
  if (shape.rank() < 2 || shape.rank() > 5)
    throw std::invalid_argument("tensor " + shape.to_string() + " must have rank 2 to 5");
  // The descriptors take int dims and strides: a larger tensor would get wrapped strides.
  if (shape.numel() > std::numeric_limits<int>::max())
    throw std::invalid_argument("tensor " + shape.to_string() + " has " + std::to_string(shape.numel()) +
                                " elements, more than cuDNN's 32-bit strides address: give a smaller --batch");
  Shape s = shape;
  while (s.rank() < 4) s.dims.push_back(1);  // cuDNN takes 4 or 5 dims: (N, C, 1, 1), (N, C, L, 1)
  dims.assign(s.dims.begin(), s.dims.end());
  const auto r = dims.size();
  strides.assign(r, 1);
  if (!channels_last) {
    for (std::size_t d = r - 1; d-- > 0;) strides[d] = strides[d + 1] * dims[d + 1];
    return;
  }
  // (n, *spatial, c): channels innermost, then the spatial dims in order, the batch outermost.
  int stride = dims[1];
  for (std::size_t d = r - 1; d >= 2; --d) {
    strides[d] = stride;
    stride *= dims[d];
  }
  strides[1] = 1;
  strides[0] = stride;
}

}  // namespace fanstore::trainer::ops
