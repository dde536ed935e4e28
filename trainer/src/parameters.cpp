// The parameter table: declarations, arena allocation and named views.
#include "trainer/parameters.hpp"

#include <stdexcept>

namespace fanstore::trainer {

void ParameterTable::require_open(const std::string& name) const {
  if (finalized_) throw std::logic_error("parameter '" + name + "' declared after ParameterTable::finalize()");
  if (find_parameter(name) >= 0 || find_buffer(name) >= 0)
    throw std::invalid_argument("parameter or buffer '" + name + "' declared twice");
}

void ParameterTable::require_finalized() const {
  if (!finalized_) throw std::logic_error("parameter views requested before ParameterTable::finalize()");
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

void ParameterTable::finalize() {
  if (finalized_) return;
  values_.assign(parameter_floats_, 0.f);
  gradients_.assign(parameter_floats_, 0.f);
  buffer_values_.assign(buffer_floats_, 0.f);
  finalized_ = true;
}

Tensor ParameterTable::value(ParameterHandle h) {
  require_finalized();
  const auto& e = parameters_.at(h.index);
  return Tensor::view(e.shape, values_.data() + e.offset);
}

Tensor ParameterTable::gradient(ParameterHandle h) {
  require_finalized();
  const auto& e = parameters_.at(h.index);
  return Tensor::view(e.shape, gradients_.data() + e.offset);
}

Tensor ParameterTable::buffer(BufferHandle h) {
  require_finalized();
  const auto& e = buffers_.at(h.index);
  return Tensor::view(e.shape, buffer_values_.data() + e.offset);
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
