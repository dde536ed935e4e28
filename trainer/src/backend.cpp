// The backend's device-independent part: tensor allocation and copies, sums and channel
// concatenation built on the backend's own primitives (allocate, copy_bytes, axpby, copy_box).
#include "trainer/backend.hpp"

#include <stdexcept>

namespace fanstore::trainer {

Box Box::whole(const Shape& shape) {
  Box b;
  b.start.assign(shape.dims.size(), 0);
  b.extent = shape.dims;
  return b;
}

std::int64_t Box::numel() const {
  std::int64_t n = 1;
  for (auto e : extent) n *= e;
  return extent.empty() ? 0 : n;
}

std::string Box::to_string() const {
  std::string s = "[";
  for (std::size_t i = 0; i < extent.size(); ++i) {
    if (i) s += ", ";
    const std::int64_t begin = i < start.size() ? start[i] : 0;
    s += std::to_string(begin) + ":" + std::to_string(begin + extent[i]);
  }
  return s + "]";
}

void Backend::require_device(const Tensor& t, const char* op, const char* what) const {
  if (!t.defined()) throw std::invalid_argument(std::string(op) + ": " + what + " is undefined");
  if (t.device() != device())
    throw std::invalid_argument(std::string(op) + ": " + what + " " + t.shape().to_string() + " is in " +
                                device_name(t.device()) + " memory, backend " + name() + " computes on " +
                                device_name(device()));
}

void Backend::require_arenas(const char* op, std::initializer_list<const Tensor*> arenas) const {
  for (const Tensor* t : arenas) {
    require_device(*t, op, "arena");
    if (t->numel() != (*arenas.begin())->numel() || t->dtype() != DType::F32)
      throw std::invalid_argument(std::string(op) + ": arenas of " + std::to_string(t->numel()) + " and " +
                                  std::to_string((*arenas.begin())->numel()) + " elements (must be equal F32)");
  }
}

void Backend::require_segments(const char* op, const Tensor& arena,
                               const std::vector<ParameterSegment>& segments) const {
  for (const auto& s : segments)
    if (s.offset + s.count > static_cast<std::size_t>(arena.numel()))
      throw std::invalid_argument(std::string(op) + ": a segment runs past the arena");
}

Tensor Backend::zeros(const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  return Tensor::on_storage(allocate(bytes), shape, dtype);
}

Tensor Backend::zeros_like(const Tensor& t) {
  return Tensor::on_storage(allocate(t.bytes()), t.shape(), t.dtype(), t.layout());
}

void Backend::copy(const Tensor& src, Tensor& dst) {
  if (!src.same_layout(dst) || src.bytes() != dst.bytes())
    throw std::invalid_argument("copy: " + src.shape().to_string() + " " + dtype_name(src.dtype()) + " into " +
                                dst.shape().to_string() + " " + dtype_name(dst.dtype()) +
                                " (shape, dtype or layout differ)");
  if (src.raw() == dst.raw()) return;
  copy_bytes(dst.raw(), dst.device(), src.raw(), src.device(), src.bytes());
}

Tensor Backend::clone(const Tensor& t) {
  Tensor out = zeros_like(t);
  copy(t, out);
  return out;
}

Tensor Backend::to_host(const Tensor& t) {
  if (t.device() == Device::Host && t.is_plain()) return t;
  Tensor plain = to_plain(t);
  if (plain.device() == Device::Host) return plain;
  Tensor host = Tensor::on_storage(Storage::host(plain.bytes()), plain.shape(), plain.dtype());
  copy_bytes(host.raw(), Device::Host, plain.raw(), plain.device(), plain.bytes());
  return host;
}

Tensor Backend::to_device(const Tensor& t) {
  if (t.device() == device()) return t;
  if (t.device() != Device::Host || !t.is_plain())
    throw std::invalid_argument("to_device: needs a plain host tensor, got one in " +
                                std::string(device_name(t.device())) + " memory");
  Tensor out = zeros(t.shape(), t.dtype());
  copy_bytes(out.raw(), device(), t.raw(), Device::Host, t.bytes());
  return out;
}

Tensor Backend::add(const std::vector<Tensor>& xs) {
  if (xs.empty()) throw std::invalid_argument("add: no operands");
  Tensor y = clone(xs[0]);
  for (std::size_t k = 1; k < xs.size(); ++k) {
    if (xs[k].shape() != y.shape())
      throw std::invalid_argument("add: cannot add " + xs[k].shape().to_string() + " to " + y.shape().to_string());
    // Same layout: add the raw storage (blocked padding is zero in every operand).
    const Tensor x = xs[k].same_layout(y) ? xs[k] : to_layout_of(xs[k], y);
    axpby(1.f, x, 1.f, y);
  }
  return y;
}

Tensor Backend::concat_channels(const std::vector<Tensor>& xs) {
  if (xs.empty()) throw std::invalid_argument("concat: no inputs");
  Shape out = xs[0].shape();
  out[1] = 0;
  for (const auto& x : xs) {
    Shape a = x.shape(), b = xs[0].shape();
    a[1] = b[1] = 0;
    if (a != b)
      throw std::invalid_argument("concat: cannot concat " + x.shape().to_string() + " with " +
                                  xs[0].shape().to_string());
    out[1] += x.shape()[1];
  }
  Tensor y = zeros(out, xs[0].dtype());
  Box box = Box::whole(out);
  for (const auto& t : xs) {
    Tensor x = to_plain(t);
    box.extent[1] = x.shape()[1];
    copy_box(x, Box::whole(x.shape()), y, box, CopyMode::Overwrite);
    box.start[1] += x.shape()[1];
  }
  return y;
}

std::vector<Tensor> Backend::split_channels(const Tensor& t, const std::vector<std::int64_t>& channels) {
  Tensor x = to_plain(t);
  std::int64_t total = 0;
  for (auto c : channels) total += c;
  if (x.shape().rank() < 2 || total != x.shape()[1])
    throw std::invalid_argument("split: " + x.shape().to_string() + " does not have " + std::to_string(total) +
                                " channels");
  std::vector<Tensor> parts;
  Box box = Box::whole(x.shape());
  for (auto c : channels) {
    Shape s = x.shape();
    s[1] = c;
    Tensor part = zeros(s, x.dtype());
    box.extent[1] = c;
    copy_box(x, box, part, Box::whole(s), CopyMode::Overwrite);
    box.start[1] += c;
    parts.push_back(part);
  }
  return parts;
}

}  // namespace fanstore::trainer
