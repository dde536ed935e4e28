// Tensor: a shape, an element type and storage owned by a backend (host or device memory), in plain
// layout or in a backend's native (e.g. blocked or channels-last) layout.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "trainer/shape.hpp"

namespace fanstore::trainer {

// Where storage lives. Host memory is readable by the CPU; Cuda memory only by kernels of the CUDA
// backend (or through Backend::to_host). Every backend op checks the device of its arguments.
enum class Device { Host, Cuda };
const char* device_name(Device device);  // "host", "cuda"

// Element types. Activations and parameters are F32 unless mixed precision keeps activations in
// BF16/F16 on a GPU; F64 holds normalisation statistics (sums over many elements).
enum class DType { F32, F64, BF16, F16 };
std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "f64", "bf16", "f16"

// A block of memory and how to free it. Backends allocate these (Backend::allocate); tensors only
// keep them alive, so a device buffer is freed by the backend that made it however the last tensor
// handle is dropped.
class Storage {
 public:
  Storage(Device device, void* data, std::size_t bytes, std::function<void(void*)> release)
      : device_(device), data_(data), bytes_(bytes), release_(std::move(release)) {}
  ~Storage() {
    if (release_) release_(data_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device() const { return device_; }
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

  // Zero-filled host memory (64-byte aligned, for vector loads). Blocks of 128 KiB and more are kept when
  // freed and handed out again (a step allocates the same sizes every step), within the most ever in use.
  static std::shared_ptr<Storage> host(std::size_t bytes);
  // Gives the kept host blocks back to the system: after a phase whose tensor sizes will not come
  // again (--grid auto's trials of other grids).
  static void release_kept_host();
  // Bytes of the host tensors alive now, and the most alive at once since the last release_kept_host() or
  // reset_host_peak().
  static std::size_t host_bytes_in_use();
  static std::size_t host_peak_bytes();
  static void reset_host_peak();
  // Bytes of freed host blocks kept for reuse (RecyclingMemory): resident, though no tensor holds them.
  static std::size_t host_bytes_kept();

 private:
  Device device_;
  void* data_;
  std::size_t bytes_;
  std::function<void(void*)> release_;
};

// A backend-specific memory layout (oneDNN's blocked nChw16c, cuDNN's NHWC, ...). Tensors in a
// native layout are only meaningful to the backend that produced them; anything else asks the
// backend for a plain copy (Backend::to_plain). Kept opaque so Tensor does not depend on oneDNN.
class NativeLayout {
 public:
  virtual ~NativeLayout() = default;
  // Elements the storage needs (blocked layouts pad channels, so this can exceed numel()).
  virtual std::size_t element_capacity() const = 0;
  virtual bool same_as(const NativeLayout& other) const = 0;
  virtual std::string describe() const = 0;
};

// Shallow-copy handle (like torch.Tensor): copies share storage. Plain layout means dense row-major
// in the order of shape().dims.
class Tensor {
 public:
  Tensor() = default;

  // Owned, zero-filled, plain F32 host memory (inputs, tests, the CPU backend's own outputs).
  static Tensor zeros(const Shape& shape);
  // Owned, zero-filled host memory in a native layout.
  static Tensor with_layout(const Shape& shape, std::shared_ptr<const NativeLayout> layout);
  // Non-owning plain F32 view of numel(shape) elements at `data` on `device`. The caller keeps the
  // memory alive for as long as the view is used.
  static Tensor view(const Shape& shape, float* data, Device device = Device::Host);
  // A tensor over (part of) a storage, starting `byte_offset` bytes in. Backends build their
  // outputs with this; the storage must hold capacity elements of dtype from the offset on.
  static Tensor on_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype = DType::F32,
                           std::shared_ptr<const NativeLayout> layout = nullptr, std::size_t byte_offset = 0);

  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return shape_.numel(); }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  bool defined() const { return data_ != nullptr; }
  bool is_plain() const { return layout_ == nullptr; }
  const std::shared_ptr<const NativeLayout>& layout() const { return layout_; }
  // True when both tensors store their elements at the same offsets (same shape, dtype and layout).
  bool same_layout(const Tensor& other) const;
  // The storage this tensor keeps alive (null for views).
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Nothing else holds this tensor's storage: a kernel handed it may write its result over it.
  bool sole_owner() const { return storage_ && storage_.use_count() == 1; }

  // F32 element pointer (a device pointer for device tensors); throws std::logic_error for another dtype.
  float* data();
  const float* data() const;
  void* raw() { return data_; }
  const void* raw() const { return data_; }
  // Elements in the storage; equals numel() for plain tensors.
  std::size_t capacity() const { return capacity_; }
  std::size_t bytes() const { return capacity_ * dtype_size(dtype_); }

  // Plain F32 host element access; only valid for such tensors (unchecked: hot loops in tests).
  float& operator[](std::int64_t i) { return static_cast<float*>(data_)[i]; }
  float operator[](std::int64_t i) const { return static_cast<const float*>(data_)[i]; }

  // Same storage and layout, new shape with the same numel (plain tensors only).
  Tensor reshaped(const Shape& shape) const;
  // numel(shape) contiguous elements starting at element `offset` of this plain tensor, sharing its
  // storage (arena slices, halo buffers packed back to back).
  Tensor slice(std::size_t offset, const Shape& shape) const;
  // Deep copy of a host tensor, same layout (device tensors: Backend::clone).
  Tensor clone() const;

 private:
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::Host;
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
  std::shared_ptr<const NativeLayout> layout_;
};

}  // namespace fanstore::trainer
