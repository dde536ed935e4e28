// The parameter table: declarations, arena allocation (host, then the backend's device) and named views.
#include "trainer/parameters.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"

namespace fanstore::trainer {

void ParameterTable::require_open(const std::string& name) const {
  if (finalized()) throw std::logic_error("parameter '" + name + "' declared after ParameterTable::finalize()");
  if (find_parameter(name) >= 0 || find_buffer(name) >= 0)
    throw std::invalid_argument("parameter or buffer '" + name + "' declared twice");
}

void ParameterTable::require_finalized() const {
  if (!finalized()) throw std::logic_error("parameter views requested before ParameterTable::finalize()");
}

ParameterHandle ParameterTable::declare_parameter(const std::string& name, const Shape& shape) {
  require_open(name);
  parameters_.push_back({name, shape, parameter_floats_});
  parameter_floats_ += static_cast<std::size_t>(shape.numel());
  return {parameters_.size() - 1};
}

BufferHandle ParameterTable::declare_buffer(const std::string& name, const Shape& shape) {
  require_open(name);
  buffers_.push_back({name, shape, buffer_floats_});
  buffer_floats_ += static_cast<std::size_t>(shape.numel());
  return {buffers_.size() - 1};
}

void ParameterTable::finalize(Backend& backend) {
  if (finalized()) return;
  backend_ = &backend;
  values_ = Tensor::zeros(Shape{static_cast<std::int64_t>(parameter_floats_)});
  gradients_ = Tensor::zeros(Shape{static_cast<std::int64_t>(parameter_floats_)});
  buffer_values_ = Tensor::zeros(Shape{static_cast<std::int64_t>(buffer_floats_)});
  gradient_part_ = value_part_ = {0, parameter_floats_};
  committed_ = backend.device() == Device::Host;  // host arenas are already the final ones
}

void ParameterTable::commit() {
  require_finalized();
  if (committed_) return;
  values_ = backend_->to_device(values_);
  gradients_ = backend_->to_device(gradients_);
  buffer_values_ = backend_->to_device(buffer_values_);
  committed_ = true;
}

Backend& ParameterTable::backend() const {
  require_finalized();
  return *backend_;
}

Tensor ParameterTable::value(ParameterHandle h) const {
  require_finalized();
  const auto& e = parameters_.at(h.index);
  if (!value_group_) return values_.slice(e.offset, e.shape);
  const Tensor& whole = gathered_.at(h.index);
  if (!whole.defined())
    throw std::logic_error("parameter '" + e.name + "' read outside gather_values()/drop_values() of its layer");
  return whole;
}

Tensor ParameterTable::gradient(ParameterHandle h) const {
  require_finalized();
  const auto& e = parameters_.at(h.index);
  if (own_gradients_.empty()) return gradients_.slice(e.offset, e.shape);
  Tensor& own = own_gradients_.at(h.index);
  if (!own.defined()) own = backend_->zeros(e.shape);
  return own;
}

void ParameterTable::keep_gradient_part(ArenaPart part) {
  if (!committed_) throw std::logic_error("ParameterTable::keep_gradient_part before commit()");
  if (part.begin > part.end || part.end > parameter_floats_) throw std::invalid_argument("gradient part out of range");
  gradient_part_ = part;
  gradients_ = backend_->zeros(Shape{static_cast<std::int64_t>(part.size())});  // the whole arena goes
  own_gradients_.assign(parameters_.size(), Tensor());
}

Tensor ParameterTable::gradients_of(ArenaPart part) const {
  require_finalized();
  if (part.intersect(gradient_part_) != part)
    throw std::logic_error("the table keeps other gradients than those asked for");
  if (part == gradient_part_) return gradients_;
  return gradients_.slice(part.begin - gradient_part_.begin, Shape{static_cast<std::int64_t>(part.size())});
}

void ParameterTable::keep_value_part(Communicator& group, const std::vector<ArenaPart>& parts) {
  if (!committed_) throw std::logic_error("ParameterTable::keep_value_part before commit()");
  if (parts.size() != static_cast<std::size_t>(group.size()))
    throw std::invalid_argument("keep_value_part: one part per rank of the group");
  std::size_t next = 0;
  for (const ArenaPart& p : parts) {
    if (p.begin != next || p.end < p.begin)
      throw std::invalid_argument("keep_value_part: the parts must tile the arena");
    next = p.end;
  }
  if (next != parameter_floats_) throw std::invalid_argument("keep_value_part: the parts must tile the arena");
  const ArenaPart own = parts[static_cast<std::size_t>(group.rank())];
  values_ = backend_->clone(values_of(own));  // the whole arena goes
  value_part_ = own;
  value_group_ = &group;
  value_parts_ = parts;
  gathered_.assign(parameters_.size(), Tensor());
}

Tensor ParameterTable::values_of(ArenaPart part) const {
  require_finalized();
  if (part.intersect(value_part_) != part) throw std::logic_error("the table keeps other values than those asked for");
  if (part == value_part_) return values_;
  return values_.slice(part.begin - value_part_.begin, Shape{static_cast<std::int64_t>(part.size())});
}

void ParameterTable::gather_values(const std::vector<ParameterHandle>& handles) {
  if (!value_group_ || handles.empty()) return;
  // One gather for the span of the layer's parameters (declared one after the other): each rank's part
  // of it in rank order, as Communicator::gather lays them out.
  ArenaPart span{parameter_floats_, 0};
  for (auto h : handles) {
    const auto& e = parameters_.at(h.index);
    span.begin = std::min(span.begin, e.offset);
    span.end = std::max(span.end, e.offset + static_cast<std::size_t>(e.shape.numel()));
  }
  Tensor whole = backend_->zeros(Shape{static_cast<std::int64_t>(span.size())});
  std::vector<std::size_t> counts;
  for (const ArenaPart& p : value_parts_) counts.push_back(p.intersect(span).size());
  if (const ArenaPart own = value_part_.intersect(span); own.size() > 0)
    backend_->copy_bytes(whole.data() + (own.begin - span.begin), whole.device(),
                         values_.data() + (own.begin - value_part_.begin), values_.device(),
                         own.size() * sizeof(float));
  value_group_->gather(whole.data(), counts);
  for (auto h : handles) {
    const auto& e = parameters_[h.index];
    gathered_[h.index] = whole.slice(e.offset - span.begin, e.shape);
  }
}

void ParameterTable::drop_values(const std::vector<ParameterHandle>& handles) {
  if (!value_group_) return;
  for (auto h : handles) gathered_.at(h.index) = Tensor();
}

bool ParameterTable::all_values_finite() const {
  double bad = backend().all_finite(values_) ? 0.0 : 1.0;
  if (value_group_) value_group_->sum(&bad, 1);
  return bad == 0.0;
}

Tensor ParameterTable::take_gradient(ParameterHandle h) {
  if (own_gradients_.empty()) throw std::logic_error("ParameterTable::take_gradient without a kept gradient part");
  return std::exchange(own_gradients_.at(h.index), Tensor());
}

Tensor ParameterTable::buffer(BufferHandle h) const {
  require_finalized();
  const auto& e = buffers_.at(h.index);
  return buffer_values_.slice(e.offset, e.shape);
}

Tensor ParameterTable::arena(Arena which) const {
  require_finalized();
  switch (which) {
    case Arena::Values: return values_;
    case Arena::Gradients: return gradients_;
    case Arena::Buffers: return buffer_values_;
  }
  throw std::logic_error("unknown arena");
}

std::vector<float> ParameterTable::read(Arena which) const {
  if (which == Arena::Values && value_group_) {  // the own part in place, the others gathered into it
    std::vector<float> whole(parameter_floats_);
    backend_->copy_bytes(whole.data() + value_part_.begin, Device::Host, values_.raw(), values_.device(),
                         value_part_.size() * sizeof(float));
    std::vector<std::size_t> counts;
    for (const ArenaPart& p : value_parts_) counts.push_back(p.size());
    value_group_->gather(whole.data(), counts);
    return whole;
  }
  const Tensor a = arena(which);
  std::vector<float> out(static_cast<std::size_t>(a.numel()));
  backend_->copy_bytes(out.data(), Device::Host, a.raw(), a.device(), out.size() * sizeof(float));
  return out;
}

void ParameterTable::write(Arena which, const std::vector<float>& data) {
  Tensor a = arena(which);
  const bool part = which == Arena::Values && value_group_;  // a whole arena, of which the own part is kept
  const std::size_t expected = part ? parameter_floats_ : static_cast<std::size_t>(a.numel());
  if (data.size() != expected)
    throw std::invalid_argument("ParameterTable::write: " + std::to_string(data.size()) + " values for an arena of " +
                                std::to_string(expected));
  const float* from = data.data() + (part ? value_part_.begin : 0);
  backend_->copy_bytes(a.raw(), a.device(), from, Device::Host, static_cast<std::size_t>(a.numel()) * sizeof(float));
}

std::ptrdiff_t ParameterTable::find_parameter(const std::string& name) const {
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (parameters_[i].name == name) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

std::ptrdiff_t ParameterTable::find_buffer(const std::string& name) const {
  for (std::size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i].name == name) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

}  // namespace fanstore::trainer
