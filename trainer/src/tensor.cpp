// Tensor and Shape: storage ownership, views, reshapes, slices and deep copies.
#include "trainer/tensor.hpp"

#include "trainer/recycling_memory.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
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

const char* device_name(Device device) { return device == Device::Host ? "host" : "cuda"; }

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16:
    case DType::F16: return 2;
  }
  return 4;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
  }
  return "?";
}

namespace {

void* aligned_block(std::size_t bytes) {
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

// A training step allocates its tensors in the same sizes every step. From the system each time, every block
// glibc would map (128 KiB and more) costs an mmap, a page fault per page and a munmap: such blocks are kept when
// freed and handed out again, within the most ever in use at once (RecyclingMemory). Never destroyed: tensors
// may outlive any static object.
constexpr std::size_t kRecycledBytes = 128u << 10;
RecyclingMemory& large_blocks() {
  static auto* memory = new RecyclingMemory(aligned_block, [](void* p, std::size_t) { std::free(p); });
  return *memory;
}

// Bytes of every host tensor alive (small ones too: at batch 1 most of ResNet-50's are), and the most at once.
std::atomic<std::size_t> tensor_bytes{0}, tensor_peak{0};
void count_alloc(std::size_t bytes) {
  const std::size_t now = tensor_bytes.fetch_add(bytes) + bytes;
  std::size_t peak = tensor_peak.load();
  while (now > peak && !tensor_peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

std::shared_ptr<Storage> Storage::host(std::size_t bytes) {
  // Blocked layouts rely on zero padding, and a zeroed buffer is what every caller wants first.
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  const bool small = rounded < kRecycledBytes;
  void* p = small ? aligned_block(rounded) : large_blocks().allocate(rounded, 64);  // a kept block is warm
  std::memset(p, 0, rounded);
  count_alloc(rounded);
  return std::make_shared<Storage>(Device::Host, p, bytes, [rounded, small](void* q) {
    if (small) std::free(q);
    else large_blocks().deallocate(q, rounded, 64);
    tensor_bytes.fetch_sub(rounded);
  });
}

void Storage::release_kept_host() {
  large_blocks().release_kept();
  reset_host_peak();
}
void Storage::reset_host_peak() { tensor_peak.store(tensor_bytes.load()); }
std::size_t Storage::host_bytes_in_use() { return tensor_bytes.load(); }
std::size_t Storage::host_peak_bytes() { return tensor_peak.load(); }
std::size_t Storage::host_bytes_kept() { return large_blocks().bytes_kept(); }

Tensor Tensor::on_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype,
                          std::shared_ptr<const NativeLayout> layout, std::size_t byte_offset) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.capacity_ = layout ? layout->element_capacity() : static_cast<std::size_t>(shape.numel());
  if (byte_offset + t.capacity_ * dtype_size(dtype) > storage->bytes())
    throw std::logic_error("tensor " + shape.to_string() + " does not fit its storage");
  t.device_ = storage->device();
  t.data_ = static_cast<char*>(storage->data()) + byte_offset;
  t.storage_ = std::move(storage);
  t.layout_ = std::move(layout);
  return t;
}

Tensor Tensor::zeros(const Shape& shape) {
  return on_storage(Storage::host(static_cast<std::size_t>(shape.numel()) * sizeof(float)), shape);
}

Tensor Tensor::with_layout(const Shape& shape, std::shared_ptr<const NativeLayout> layout) {
  if (!layout) return zeros(shape);
  const std::size_t bytes = layout->element_capacity() * sizeof(float);
  return on_storage(Storage::host(bytes), shape, DType::F32, std::move(layout));
}

Tensor Tensor::view(const Shape& shape, float* data, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.capacity_ = static_cast<std::size_t>(shape.numel());
  t.device_ = device;
  t.data_ = data;
  return t;
}

float* Tensor::data() {
  if (dtype_ != DType::F32)
    throw std::logic_error(std::string("Tensor::data() on a ") + dtype_name(dtype_) + " tensor");
  return static_cast<float*>(data_);
}

const float* Tensor::data() const { return const_cast<Tensor*>(this)->data(); }

bool Tensor::same_layout(const Tensor& other) const {
  if (shape_ != other.shape_ || dtype_ != other.dtype_) return false;
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

Tensor Tensor::slice(std::size_t offset, const Shape& shape) const {
  if (!is_plain()) throw std::logic_error("Tensor::slice needs a plain tensor");
  const auto count = static_cast<std::size_t>(shape.numel());
  if (offset + count > capacity_)
    throw std::out_of_range("Tensor::slice: " + std::to_string(count) + " elements at " + std::to_string(offset) +
                            " run past the " + std::to_string(capacity_) + " of " + shape_.to_string());
  Tensor t = *this;
  t.shape_ = shape;
  t.capacity_ = count;
  t.data_ = static_cast<char*>(data_) + offset * dtype_size(dtype_);
  return t;
}

Tensor Tensor::clone() const {
  if (device_ != Device::Host) throw std::logic_error("Tensor::clone of a device tensor; use Backend::clone");
  Tensor t = on_storage(Storage::host(bytes()), shape_, dtype_, layout_);
  std::memcpy(t.data_, data_, bytes());
  return t;
}

}  // namespace fanstore::trainer
