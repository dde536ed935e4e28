// Tensor and Shape: storage ownership, views, reshapes and deep copies.
#include "trainer/tensor.hpp"

#include <algorithm>
#include <stdexcept>

namespace fanstore::trainer {

std::int64_t Shape::spatial_size() const {
  std::int64_t n = 1;
  for (int i = 2; i < rank(); ++i) n *= (*this)[i];
  return n;
}

std::int64_t Shape::numel() const {
  if (dims.empty()) return 0;
  std::int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

std::string Shape::to_string() const {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + ")";
}

namespace {
std::shared_ptr<float[]> allocate_zeroed(std::size_t count) {
  // make_shared<float[]>(n) value-initialises, i.e. zero-fills; blocked layouts rely on zero padding.
  return std::make_shared<float[]>(std::max<std::size_t>(count, 1));
}
}  // namespace

Tensor Tensor::zeros(const Shape& shape) {
  Tensor t;
  t.shape_ = shape;
  t.capacity_ = static_cast<std::size_t>(shape.numel());
  t.owner_ = allocate_zeroed(t.capacity_);
  t.data_ = t.owner_.get();
  return t;
}

Tensor Tensor::with_layout(const Shape& shape, std::shared_ptr<const NativeLayout> layout) {
  if (!layout) return zeros(shape);
  Tensor t;
  t.shape_ = shape;
  t.capacity_ = layout->float_capacity();
  t.owner_ = allocate_zeroed(t.capacity_);
  t.data_ = t.owner_.get();
  t.layout_ = std::move(layout);
  return t;
}

Tensor Tensor::view(const Shape& shape, float* data) {
  Tensor t;
  t.shape_ = shape;
  t.capacity_ = static_cast<std::size_t>(shape.numel());
  t.data_ = data;
  return t;
}

bool Tensor::same_layout(const Tensor& other) const {
  if (shape_ != other.shape_) return false;
  if (!layout_ || !other.layout_) return !layout_ && !other.layout_;
  return layout_->same_as(*other.layout_);
}

Tensor Tensor::reshaped(const Shape& shape) const {
  if (!is_plain()) throw std::logic_error("Tensor::reshaped needs a plain tensor; call Backend::to_plain first");
  if (shape.numel() != numel())
    throw std::invalid_argument("Tensor::reshaped: " + shape_.to_string() + " -> " + shape.to_string() +
                                " changes the element count");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = with_layout(shape_, layout_);
  std::copy(data_, data_ + capacity_, t.data_);
  return t;
}

}  // namespace fanstore::trainer
