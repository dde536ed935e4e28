// Test harness: one layer on the CPU backend with its own parameter table, plus the
// finite-difference gradient check used by every layer test.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "trainer/layer.hpp"

namespace fanstore::trainer::testing {

// Tests run oneDNN on a fixed thread count so results do not depend on the machine.
std::shared_ptr<Backend> test_backend();

// Uniform(lo, hi) values; if min_gap > 0, every |value| >= min_gap (keeps ReLU kinks away from
// finite-difference probes).
Tensor random_tensor(const Shape& shape, Rng& rng, float lo = -1.f, float hi = 1.f, float min_gap = 0.f);
// A random permutation of evenly spaced values (distinct by `spacing`): max-pool gradients are
// only well defined without ties.
Tensor distinct_tensor(const Shape& shape, Rng& rng, float spacing);

class LayerHarness {
 public:
  // Attaches the layer, allocates its parameters and fills them with uniform(-1, 1) values, except
  // parameters named "*.weight" of norm layers, which get uniform(0.5, 1.5).
  LayerHarness(std::unique_ptr<Layer> layer, std::uint64_t seed = 1);
  Layer& layer() { return *layer_; }
  ParameterTable& table() { return table_; }
  Backend& backend() { return *backend_; }
  // Forward, output in plain layout.
  Tensor forward(const std::vector<Tensor>& inputs, Mode mode = Mode::Train);
  // Backward, input gradients in plain layout.
  std::vector<Tensor> backward(const Tensor& dy);

 private:
  std::shared_ptr<Backend> backend_;
  ParameterTable table_;
  std::unique_ptr<Layer> layer_;
};

// Central differences of L = sum(r * y) in double, against backward(r), for sampled elements of
// every input and every parameter. Passes when |analytic - numeric| <= atol + rtol * |numeric|.
struct GradientCheck {
  double epsilon = 3e-3;
  double atol = 2e-3;
  double rtol = 2e-2;
  int samples = 20;  // elements probed per tensor (all of them when the tensor is smaller)
  std::vector<bool> differentiable_inputs;  // empty = all
  std::function<void()> before_forward;     // e.g. reseed a dropout mask
};

// Runs the check with gtest EXPECTs; returns the worst |analytic - numeric| / (atol + rtol|numeric|).
double check_gradients(LayerHarness& harness, std::vector<Tensor> inputs, const GradientCheck& options = {});

// Largest |a - b| / (atol + rtol * |b|) over all elements; <= 1 means within tolerance.
double tolerance_ratio(const Tensor& a, const Tensor& b, double atol, double rtol);

}  // namespace fanstore::trainer::testing
