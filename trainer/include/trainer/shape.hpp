// Tensor shapes: (N, C), (N, C, H, W) or (N, C, D, H, W), with the helpers every layer needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace fanstore::trainer {

// A dense shape, outermost dimension first (PyTorch order). Rank 2 is (N, features), rank 4 is
// (N, C, H, W), rank 5 is (N, C, D, H, W). Rank 1 is used for per-channel vectors (C).
struct Shape {
  std::vector<std::int64_t> dims;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> d) : dims(d) {}
  explicit Shape(std::vector<std::int64_t> d) : dims(std::move(d)) {}

  int rank() const { return static_cast<int>(dims.size()); }
  std::int64_t operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) { return dims[static_cast<std::size_t>(i)]; }
  std::int64_t batch() const { return dims.at(0); }
  std::int64_t channels() const { return dims.at(1); }
  // Number of spatial dimensions (0 for (N, C), 2 for images, 3 for volumes).
  int spatial_rank() const { return rank() >= 2 ? rank() - 2 : 0; }
  // Product of the spatial extents (1 when there are none).
  std::int64_t spatial_size() const;
  std::int64_t numel() const;
  bool operator==(const Shape&) const = default;
  // "(2, 64, 16, 16)"
  std::string to_string() const;
};

}  // namespace fanstore::trainer
