// Dims and strides of plain and channels-last tensors.
#include "strided_dims.hpp"

#include <stdexcept>

namespace fanstore::trainer::ops {

void strided_dims(const Shape& shape, bool channels_last, std::vector<int>& dims, std::vector<int>& strides) {
  Shape s = shape;
  if (s.rank() == 2) s.dims.insert(s.dims.end(), {1, 1});
  if (s.rank() < 4 || s.rank() > 5)
    throw std::invalid_argument("tensor " + shape.to_string() + " must have rank 2, 4 or 5");
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
