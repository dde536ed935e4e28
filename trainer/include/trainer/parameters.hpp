// The parameter table: every trainable tensor in one contiguous arena (plus a gradient arena of the
// same layout), and non-trainable buffers (running statistics) in a third, all as named views;
// each arena is one allocation on the backend's device.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "trainer/tensor.hpp"

namespace fanstore::trainer {

class Backend;
class Communicator;

struct ParameterEntry {
  std::string name;    // PyTorch state_dict name, e.g. "layer1.0.conv1.weight"
  Shape shape;         // e.g. (64, 64, 1, 1)
  std::size_t offset;  // in elements, into its arena
};

// Handles returned by declare_*; stable for the table's lifetime.
struct ParameterHandle {
  std::size_t index = static_cast<std::size_t>(-1);
};
struct BufferHandle {
  std::size_t index = static_cast<std::size_t>(-1);
};

enum class Arena { Values, Gradients, Buffers };

// Elements [begin, end) of the parameter arena.
struct ArenaPart {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
  // The elements of both (empty, at the later begin, when they are disjoint).
  ArenaPart intersect(const ArenaPart& p) const {
    const std::size_t b = std::max(begin, p.begin);
    return {b, std::max(b, std::min(end, p.end))};
  }
  bool operator==(const ArenaPart&) const = default;
};

// Layers declare their tensors while the model is built; finalize() then allocates the arenas once.
// Optimizers, the gradient allreduce and checkpoints work on whole arenas: one op or one loop, no
// per-layer code.
//
// Life cycle: declare_* -> finalize(backend) -> initialise (host code writes the views) -> commit().
// finalize() allocates zero-filled arenas in host memory so layers can initialise parameters with
// plain host code; commit() moves them to the backend's device (a no-op for a host backend). Views
// taken before commit() point at the host arenas; take them again after.
class ParameterTable {
 public:
  ParameterHandle declare_parameter(const std::string& name, const Shape& shape);
  BufferHandle declare_buffer(const std::string& name, const Shape& shape);
  void finalize(Backend& backend);
  void commit();
  bool finalized() const { return backend_ != nullptr; }
  bool committed() const { return committed_; }
  Backend& backend() const;
  // Where the arenas are now (host until commit() on a device backend).
  Device device() const { return values_.device(); }

  Tensor value(ParameterHandle h) const;
  Tensor gradient(ParameterHandle h) const;
  Tensor buffer(BufferHandle h) const;
  // A whole arena as a 1-D tensor (parameter_count() or buffer_count() elements).
  Tensor arena(Arena which) const;
  // Host copies of an arena, and writing one back (checkpoints, weight exchange, the guard's tests).
  std::vector<float> read(Arena which) const;
  void write(Arena which, const std::vector<float>& data);

  const std::vector<ParameterEntry>& parameters() const { return parameters_; }
  const std::vector<ParameterEntry>& buffers() const { return buffers_; }
  std::size_t parameter_count() const { return parameter_floats_; }
  std::size_t buffer_count() const { return buffer_floats_; }

  // Raw arena pointers (device pointers after commit() on a device backend): values/gradients hold
  // parameter_count() floats, buffer_values buffer_count().
  float* values() { return values_.data(); }
  float* gradients() { return gradients_.data(); }
  float* buffer_values() { return buffer_values_.data(); }
  const float* values() const { return values_.data(); }
  const float* gradients() const { return gradients_.data(); }
  const float* buffer_values() const { return buffer_values_.data(); }

  // ZeRO stage 2 (GradientReduceScatter): the table keeps the gradients of `part` only. arena(Gradients),
  // gradients(), read/write(Gradients) are then that part; gradient(h) is a zero tensor of its own, made at
  // its first use and the same until take_gradient(h) hands it over (backward writes it, the reduction sums
  // it into the parts). After commit().
  void keep_gradient_part(ArenaPart part);
  // The gradients kept: the whole arena unless keep_gradient_part() was called.
  ArenaPart gradient_part() const { return gradient_part_; }
  // Elements `part` of the gradients, which must lie within the kept ones (throws std::logic_error).
  Tensor gradients_of(ArenaPart part) const;
  // The tensor gradient(h) made since the last take, or an undefined one; only with a kept part.
  Tensor take_gradient(ParameterHandle h);

  // ZeRO stage 3 (with stage 2's keep_gradient_part): the table keeps the values of parts[group.rank()] only
  // (the parts tile the arena in rank order); arena(Values) and values() are then that part. A parameter's
  // value(h) exists between gather_values() and drop_values() of its layer: collective over `group`, every
  // rank gathering the same layers in the same order. read(Values) and all_values_finite() are collective
  // too (the whole arena gathered, the answer of every part); write(Values) keeps the own part of a whole
  // arena. After commit().
  void keep_value_part(Communicator& group, const std::vector<ArenaPart>& parts);
  // The values kept: the whole arena unless keep_value_part() was called.
  ArenaPart value_part() const { return value_part_; }
  bool values_sharded() const { return value_group_ != nullptr; }
  // Elements `part` of the values, which must lie within the kept ones (throws std::logic_error).
  Tensor values_of(ArenaPart part) const;
  // Whole copies of these parameters' values until drop_values(); no-ops unless a value part is kept.
  void gather_values(const std::vector<ParameterHandle>& handles);
  void drop_values(const std::vector<ParameterHandle>& handles);
  // No NaN/Inf in any value (of any rank's part when a value part is kept).
  bool all_values_finite() const;

  // Index of a parameter/buffer by name, or -1.
  std::ptrdiff_t find_parameter(const std::string& name) const;
  std::ptrdiff_t find_buffer(const std::string& name) const;

 private:
  void require_open(const std::string& name) const;
  void require_finalized() const;

  std::vector<ParameterEntry> parameters_, buffers_;
  std::size_t parameter_floats_ = 0, buffer_floats_ = 0;
  Backend* backend_ = nullptr;
  bool committed_ = false;
  Tensor values_, gradients_, buffer_values_;
  ArenaPart gradient_part_, value_part_;
  // With a kept value part: the group and every rank's part; gather_values()'s tensors per parameter.
  Communicator* value_group_ = nullptr;
  std::vector<ArenaPart> value_parts_;
  std::vector<Tensor> gathered_;
  // Per parameter once keep_gradient_part() was called (empty before): gradient(h)'s tensors.
  mutable std::vector<Tensor> own_gradients_;
};

}  // namespace fanstore::trainer
