// Parameter-free structural layers: residual add, channel concat, dropout, flatten.
#pragma once

#include <cstdint>

#include "trainer/layer.hpp"

namespace fanstore::trainer {

// y = a + b (+ ...), same shapes. Stays in the backend's layout when all inputs share one (a
// ResNet shortcut adds two batch-norm outputs, both blocked), else adds in plain layout.
class Add final : public Layer {
 public:
  explicit Add(std::string name, std::size_t inputs = 2) : Layer(std::move(name)), inputs_(inputs) {}
  std::string kind() const override { return "Add"; }
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(const Tensor& dy) override;

 private:
  std::size_t inputs_;
};

// Concatenation along channels (dim 1), like torch.cat(dim=1), in plain layout.
class Concat final : public Layer {
 public:
  explicit Concat(std::string name) : Layer(std::move(name)) {}
  std::string kind() const override { return "Concat"; }
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(const Tensor& dy) override;

 private:
  std::vector<Shape> input_shapes_;
};

// Inverted dropout (PyTorch): Train zeroes each element with probability p and scales survivors by
// 1/(1-p); Eval is the identity. The mask comes from a seeded generator, so runs repeat exactly;
// reseed() restarts the sequence (finite-difference tests need the same mask every forward).
class Dropout final : public Layer {
 public:
  Dropout(std::string name, float p, std::uint64_t seed = 0x5eed);
  std::string kind() const override { return "Dropout"; }
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(const Tensor& dy) override;
  void reseed(std::uint64_t seed) { rng_ = Rng(seed); }

 private:
  float p_;
  Rng rng_;
  std::vector<float> mask_;  // 0 or 1/(1-p) per element of the plain input
  bool identity_ = true;     // last forward was Eval (or p == 0)
  Shape shape_;
};

// (N, C, ...) -> (N, C*...), in plain layout (PyTorch's torch.flatten(x, 1)).
class Flatten final : public Layer {
 public:
  explicit Flatten(std::string name) : Layer(std::move(name)) {}
  std::string kind() const override { return "Flatten"; }
  Shape output_shape(const std::vector<Shape>& inputs) const override;
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override;
  std::vector<Tensor> backward(const Tensor& dy) override;

 private:
  Shape input_shape_;
};

}  // namespace fanstore::trainer
