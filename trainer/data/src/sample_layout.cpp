// Element counts of a sample's input and target shapes.
#include <functional>
#include <numeric>

#include "trainer/data/sample_dataset.hpp"

namespace fanstore::trainer::data {
namespace {

std::size_t product(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::size_t{1},
                         [](std::size_t total, std::int64_t dim) { return total * static_cast<std::size_t>(dim); });
}

}  // namespace

std::size_t SampleLayout::input_elements() const { return product(input_shape); }
std::size_t SampleLayout::target_elements() const { return product(target_shape); }  // {} -> 1

}  // namespace fanstore::trainer::data
