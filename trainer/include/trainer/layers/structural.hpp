// Parameter-free structural layers: residual add, channel concat, dropout, flatten.
#pragma once

#include <cstdint>

#include "trainer/layer.hpp"

namespace fanstore::trainer {

// y = a + b (+ ...), same shapes (Backend::add): stays in the backend's layout when the inputs
// share one (a ResNet shortcut adds two batch-norm outputs, both blocked).
class Add final : public Layer {
 public:
  explicit Add(std::string name, std::size_t inputs = 2) : Layer(std::move(name)), inputs_(inputs) {}
  std::string kind() const override { return "Add"; }
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;

 private:
  std::size_t inputs_;
};

// Concatenation along channels (dim 1), like torch.cat(dim=1), in plain layout (Backend::concat_channels).
class Concat final : public Layer {
 public:
  explicit Concat(std::string name) : Layer(std::move(name)) {}
  std::string kind() const override { return "Concat"; }
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;

 private:
  std::vector<std::int64_t> channels_;  // of each input in the last forward
};

// Inverted dropout (PyTorch): Train zeroes each element with probability p and scales survivors by
// 1/(1-p); Eval is the identity. The mask is a pure function of (seed, step, global element index)
// (Backend::dropout), so runs repeat exactly, a resumed run draws the masks of the uninterrupted
// one (the training loop calls set_step), and a spatial slab (set_placement) draws its part of the
// serial mask. Without set_step calls each Train forward moves to the next step.
class Dropout final : public Layer {
 public:
  Dropout(std::string name, float p, std::uint64_t seed = 0x5eed);
  std::string kind() const override { return "Dropout"; }
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;
  void set_step(std::uint64_t step) override { step_ = step; }
  // Restarts the mask sequence at step 0 (finite-difference tests need the same mask every forward).
  void reseed(std::uint64_t seed) {
    seed_ = seed;
    step_ = 0;
  }
  // Where this layer's input sits in the global tensor (spatially split runs); empty = whole.
  void set_placement(GlobalPlacement placement) { placement_ = std::move(placement); }

 private:
  float p_;
  std::uint64_t seed_;
  std::uint64_t step_ = 0;
  GlobalPlacement placement_;
  DropoutMask last_;      // the mask of the last Train forward (backward applies it again)
  bool identity_ = true;  // last forward was Eval (or p == 0)
};

// (N, C, ...) -> (N, C*...), in plain layout (PyTorch's torch.flatten(x, 1)).
class Flatten final : public Layer {
 public:
  explicit Flatten(std::string name) : Layer(std::move(name)) {}
  std::string kind() const override { return "Flatten"; }
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(Tensor dy) override;

 private:
  Shape input_shape_;
};

}  // namespace fanstore::trainer
