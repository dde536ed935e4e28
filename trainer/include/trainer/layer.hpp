// The Layer interface: shape inference, parameter declaration, explicit forward and backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/parameters.hpp"
#include "trainer/random.hpp"

namespace fanstore::trainer {

// A layer owns its backend kernels and what it saves for backward; its parameters live in the
// model's ParameterTable under "<layer name>.<suffix>" (PyTorch's state_dict names).
//
// Contract: forward() may be called any number of times; backward(dy) refers to the most recent
// forward in Mode::Train, returns one gradient per input (in any backend layout) and OVERWRITES the
// layer's parameter gradients (each parameter is used once per step, so no accumulation is needed).
// A forward in Mode::Eval keeps nothing, and a layer that would need what it kept throws
// std::logic_error from a backward after it (a model's backward always does). dy is taken by
// value: a caller that moves it in lets an activation write its gradient over it (one activation-sized
// buffer less at the peak of backward).
class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  // PyTorch-like type name for tables ("Conv2d", "BatchNorm3d", ...).
  virtual std::string kind() const = 0;
  // Output shape for the given input shapes; throws std::invalid_argument on a mismatch.
  virtual Shape output_shape(const std::vector<Shape>& inputs) const = 0;

  // Binds the layer to a backend and declares its parameters. Called once, before table.finalize().
  void attach(Backend& backend, ParameterTable& table);
  // PyTorch's default initialisation of this layer's parameters and buffers (after finalize()).
  virtual void initialize(Rng& rng) { (void)rng; }

  virtual Tensor forward(const std::vector<Tensor>& inputs, Mode mode) = 0;
  virtual std::vector<Tensor> backward(Tensor dy) = 0;
  // What a Mode::Train forward keeps until its backward, besides parameters, on the CPU backend: its first
  // input, its output or nothing (the performance model's memory estimate reads it).
  enum class Saves { kNothing, kInput, kOutput };
  virtual Saves saves() const { return Saves::kNothing; }
  // Whether backward must return its inputs' gradient. Off for a layer on the model input in training
  // (nothing reads that gradient, and a first convolution's data gradient over few channels is among the
  // slowest kernels of a step); a layer may then return undefined tensors (Convolution does).
  void set_input_gradient(bool needed) { input_gradient_ = needed; }
  bool input_gradient() const { return input_gradient_; }
  // The optimizer step the next forward belongs to. Layers whose randomness must repeat exactly on
  // resume and across a spatial split (dropout masks) key it by this; the rest ignore it.
  virtual void set_step(std::uint64_t step) { (void)step; }

  // Trainable floats this layer declared.
  std::size_t parameter_count() const;
  const std::vector<ParameterHandle>& parameter_handles() const { return parameters_; }

 protected:
  virtual void declare_parameters() {}
  ParameterHandle declare_parameter(const std::string& suffix, const Shape& shape);
  BufferHandle declare_buffer(const std::string& suffix, const Shape& shape);
  Backend& backend() const { return *backend_; }
  ParameterTable& table() const { return *table_; }

 private:
  std::string name_;
  Backend* backend_ = nullptr;
  ParameterTable* table_ = nullptr;
  std::vector<ParameterHandle> parameters_;
  bool input_gradient_ = true;
};

// Shape-check helpers shared by layers.
void expect_input_count(const Layer& layer, const std::vector<Shape>& inputs, std::size_t count);
void expect_rank(const Layer& layer, const Shape& shape, int rank_lo, int rank_hi);

}  // namespace fanstore::trainer
