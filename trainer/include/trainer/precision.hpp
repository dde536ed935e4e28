// Mixed precision: which type the activations and the convolution/GEMM inputs use, and the dynamic
// loss scaling that keeps fp16 gradients from underflowing. Host logic, the same for every backend.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/tensor.hpp"

namespace fanstore::trainer {

// fp32: everything in float. bf16/fp16: activations, and the weights as the kernels read them, in
// the half type with float accumulation; the parameter arena, the gradients the optimizer sees
// and the optimizer state stay fp32 ("master weights").
enum class Precision { FP32, BF16, FP16 };

// "fp32", "bf16" or "fp16"; throws std::invalid_argument naming the choices otherwise.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision precision);
DType activation_dtype(Precision precision);

// Dynamic loss scaling (Micikevicius et al., "Mixed Precision Training"; torch.cuda.amp.GradScaler):
// the loss gradient is multiplied by scale() before backward so small fp16 gradients survive;
// the fp32 gradients are then divided by it. A step whose gradients hold an Inf/NaN is skipped and
// the scale halves; after growth_interval steps in a row without one, the scale doubles.
class LossScaler {
 public:
  struct Options {
    float initial_scale = 65536.f;  // 2^16, GradScaler's default
    float growth_factor = 2.f;
    float backoff_factor = 0.5f;
    std::int64_t growth_interval = 2000;
    float min_scale = 1.f;         // never scale below 1 (an fp32 step is no worse)
    float max_scale = 16777216.f;  // 2^24: beyond it fp16 gradients of O(1) losses overflow anyway
  };
  // enabled = false (fp32, bf16: the range of fp32) keeps the scale at 1 and never skips.
  explicit LossScaler(bool enabled) : LossScaler(enabled, Options{}) {}
  LossScaler(bool enabled, const Options& options);

  bool enabled() const { return enabled_; }
  float scale() const { return scale_; }
  // After unscaling: were the gradients finite? Returns true when the optimizer step should run.
  bool update(bool gradients_finite);
  std::uint64_t skipped_steps() const { return skipped_; }

 private:
  bool enabled_;
  Options options_;
  float scale_;
  std::int64_t good_steps_ = 0;
  std::uint64_t skipped_ = 0;
};

}  // namespace fanstore::trainer
