// The exactness check of the spatial tests: run a model serially and on a grid (same seed, same
// input and output gradient), gather the grid's output, input gradient and parameter gradients, and
// measure each against the serial tensor: error = max|grid - serial| / max|serial|.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainer/distributed_model.hpp"

namespace fanstore::trainer::testing {

// One compared tensor: the grid's error and what it is allowed.
struct TensorError {
  std::string name;
  double error = 0;
  // The serial run's own change when its input moves by one float ulp (x * (1 + 1e-7) on every 7th
  // element): how far two correct float32 runs that differ only in rounding can drift on this tensor.
  // 0 unless calibrated.
  double sensitivity = 0;
  // Float32 accumulation noise of a gradient summed over R terms per element: sqrt(R) * 2^-24
  // relative to the result (random-sign terms). 0 unless calibrated.
  double accumulation = 0;
  double bound(double tolerance) const;
};

struct ExactnessReport {
  TensorError output, input_gradient;
  std::vector<TensorError> parameters, buffers;
  // The largest error / bound over every tensor (<= 1 passes), and the tensor it belongs to.
  double worst_ratio = 0;
  std::string worst;
  double worst_parameter_error = 0;  // the largest raw parameter-gradient error
  int parameters_above = 0;          // parameter gradients whose raw error exceeds `tolerance`
};

struct ExactnessOptions {
  double tolerance = 1e-5;
  // Also measure each tensor's sensitivity and allow max(tolerance, 4 x sensitivity, 4 x accumulation
  // noise): for deep normalised networks whose float32 result depends on rounding at the 1e-5 level,
  // and for weight gradients summed over hundreds of thousands of positions.
  bool calibrate = false;
  // Set every batch/instance-norm shift to this (0: leave the initialisation) so the ReLUs after them
  // see inputs far from their kink: a ReLU input within rounding of 0 flips between two correct runs.
  float norm_shift = 0;
};

// Prints one line per report on rank 0 (the figures the closing note quotes).
void print_report(const std::string& what, const GridShape& grid, const ExactnessReport& r);

// On each grid of `grids` with as many ranks as the world (the others are skipped): the grid's run against the
// serial one, print_report, and a gtest failure when any tensor's error exceeds its bound.
// `build(batch)` makes the model (the serial instance with batch S * B and the split one with batch B per
// sample group; the same seed gives the same parameters). Runs on the world communicator. Sample group g
// takes samples [g*B, (g+1)*B) of the serial batch and the output gradient of its loss, a mean over its B
// samples (S times the serial one); the gradients summed over all ranks and divided by S (what
// GradientAllreduce does) must be the serial ones. Every rank gets the same report.
void expect_exact(const std::string& what, const std::function<std::unique_ptr<Model>(std::int64_t batch)>& build,
                  std::int64_t batch_per_group, const std::vector<GridShape>& grids, DistributedOptions options = {},
                  ExactnessOptions check = {});

}  // namespace fanstore::trainer::testing
