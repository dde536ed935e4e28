// The parameter table: every trainable tensor in one contiguous arena (plus a gradient arena of the
// same layout), and non-trainable buffers (running statistics) in a second arena, all as named views.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "trainer/tensor.hpp"

namespace fanstore::trainer {

struct ParameterEntry {
  std::string name;    // PyTorch state_dict name, e.g. "layer1.0.conv1.weight"
  Shape shape;         // e.g. (64, 64, 1, 1)
  std::size_t offset;  // in floats, into its arena
};

// Handles returned by declare_*; stable for the table's lifetime.
struct ParameterHandle {
  std::size_t index = static_cast<std::size_t>(-1);
};
struct BufferHandle {
  std::size_t index = static_cast<std::size_t>(-1);
};

// Layers declare their tensors while the model is built; finalize() then allocates the arenas once.
// Optimizers and checkpoints walk values()/gradients() as flat float arrays: one loop, no per-layer code.
class ParameterTable {
 public:
  ParameterHandle declare_parameter(const std::string& name, const Shape& shape);
  BufferHandle declare_buffer(const std::string& name, const Shape& shape);
  // Allocates (zero-filled) value, gradient and buffer arenas. No declarations after this.
  void finalize();
  bool finalized() const { return finalized_; }

  Tensor value(ParameterHandle h);
  Tensor gradient(ParameterHandle h);
  Tensor buffer(BufferHandle h);

  const std::vector<ParameterEntry>& parameters() const { return parameters_; }
  const std::vector<ParameterEntry>& buffers() const { return buffers_; }
  std::size_t parameter_count() const { return parameter_floats_; }
  std::size_t buffer_count() const { return buffer_floats_; }

  // Flat arenas: values/gradients hold parameter_count() floats, buffer_values buffer_count().
  float* values() { return values_.data(); }
  float* gradients() { return gradients_.data(); }
  float* buffer_values() { return buffer_values_.data(); }
  const float* values() const { return values_.data(); }
  const float* gradients() const { return gradients_.data(); }
  const float* buffer_values() const { return buffer_values_.data(); }

  // Index of a parameter/buffer by name, or -1.
  std::ptrdiff_t find_parameter(const std::string& name) const;
  std::ptrdiff_t find_buffer(const std::string& name) const;

 private:
  void require_open(const std::string& name) const;
  void require_finalized() const;

  std::vector<ParameterEntry> parameters_, buffers_;
  std::size_t parameter_floats_ = 0, buffer_floats_ = 0;
  bool finalized_ = false;
  std::vector<float> values_, gradients_, buffer_values_;
};

}  // namespace fanstore::trainer
