// Layer base: attaching to a backend/parameter table and the shared shape checks.
#include "trainer/layer.hpp"

#include <stdexcept>

namespace fanstore::trainer {

void Layer::attach(Backend& backend, ParameterTable& table) {
  if (backend_) throw std::logic_error("layer '" + name_ + "' attached twice");
  backend_ = &backend;
  table_ = &table;
  declare_parameters();
}

ParameterHandle Layer::declare_parameter(const std::string& suffix, const Shape& shape) {
  auto h = table_->declare_parameter(name_ + "." + suffix, shape);
  parameters_.push_back(h);
  return h;
}

BufferHandle Layer::declare_buffer(const std::string& suffix, const Shape& shape) {
  return table_->declare_buffer(name_ + "." + suffix, shape);
}

std::size_t Layer::parameter_count() const {
  std::size_t n = 0;
  for (auto h : parameters_) n += static_cast<std::size_t>(table_->parameters()[h.index].shape.numel());
  return n;
}

void expect_input_count(const Layer& layer, const std::vector<Shape>& inputs, std::size_t count) {
  if (inputs.size() != count)
    throw std::invalid_argument(layer.name() + ": expects " + std::to_string(count) + " input(s), got " +
                                std::to_string(inputs.size()));
}

void expect_rank(const Layer& layer, const Shape& shape, int rank_lo, int rank_hi) {
  if (shape.rank() < rank_lo || shape.rank() > rank_hi)
    throw std::invalid_argument(layer.name() + ": input " + shape.to_string() + " must have rank " +
                                std::to_string(rank_lo) + (rank_hi != rank_lo ? "-" + std::to_string(rank_hi) : ""));
}

}  // namespace fanstore::trainer
