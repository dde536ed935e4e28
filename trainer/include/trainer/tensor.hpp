// Tensor: a shape plus float32 storage, in plain layout or in a backend's native (e.g. blocked) layout.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "trainer/shape.hpp"

namespace fanstore::trainer {

// Where the storage lives. Only Host exists today; the CUDA backend adds Cuda and its own allocator,
// and every kernel checks the device of its arguments (see docs/trainer.md).
enum class Device { Host };

// A backend-specific memory layout (oneDNN's blocked nChw16c, later cuDNN's NHWC, ...). Tensors in a
// native layout are only meaningful to the backend that produced them; anything else asks the
// backend for a plain copy (Backend::to_plain). Kept opaque so Tensor does not depend on oneDNN.
class NativeLayout {
 public:
  virtual ~NativeLayout() = default;
  // Floats the storage needs (blocked layouts pad channels, so this can exceed numel()).
  virtual std::size_t float_capacity() const = 0;
  virtual bool same_as(const NativeLayout& other) const = 0;
  virtual std::string describe() const = 0;
};

// Shallow-copy handle (like torch.Tensor): copies share storage; clone() makes a deep copy.
// Plain layout means dense row-major in the order of shape().dims.
class Tensor {
 public:
  Tensor() = default;

  // Owned, zero-filled, plain layout.
  static Tensor zeros(const Shape& shape);
  // Owned, zero-filled, in a backend's native layout.
  static Tensor with_layout(const Shape& shape, std::shared_ptr<const NativeLayout> layout);
  // Non-owning plain view of numel(shape) floats (the parameter arena hands these out). The caller
  // keeps `data` alive for as long as the view is used.
  static Tensor view(const Shape& shape, float* data);

  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return shape_.numel(); }
  Device device() const { return Device::Host; }
  bool defined() const { return data_ != nullptr; }
  bool is_plain() const { return layout_ == nullptr; }
  const std::shared_ptr<const NativeLayout>& layout() const { return layout_; }
  // True when both tensors store their elements at the same offsets (same shape and layout).
  bool same_layout(const Tensor& other) const;

  float* data() { return data_; }
  const float* data() const { return data_; }
  // Floats in the storage; equals numel() for plain tensors.
  std::size_t capacity() const { return capacity_; }

  // Plain-layout element access; only valid when is_plain().
  float& operator[](std::int64_t i) { return data_[i]; }
  float operator[](std::int64_t i) const { return data_[i]; }

  // Same storage and layout, new shape with the same numel (plain tensors only).
  Tensor reshaped(const Shape& shape) const;
  // Deep copy, same layout.
  Tensor clone() const;

 private:
  Shape shape_;
  std::shared_ptr<float[]> owner_;
  float* data_ = nullptr;
  std::size_t capacity_ = 0;
  std::shared_ptr<const NativeLayout> layout_;
};

}  // namespace fanstore::trainer
