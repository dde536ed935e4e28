// Precision names and the dynamic loss scaler's state machine.
#include "trainer/precision.hpp"

#include <algorithm>
#include <stdexcept>

namespace fanstore::trainer {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "bf16") return Precision::BF16;
  if (name == "fp16") return Precision::FP16;
  throw std::invalid_argument("unknown precision '" + name + "' (expected fp32, bf16 or fp16)");
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::FP32: return "fp32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
  }
  return "?";
}

DType activation_dtype(Precision precision) {
  switch (precision) {
    case Precision::FP32: return DType::F32;
    case Precision::BF16: return DType::BF16;
    case Precision::FP16: return DType::F16;
  }
  return DType::F32;
}

LossScaler::LossScaler(bool enabled, const Options& options)
    : enabled_(enabled), options_(options), scale_(enabled ? options.initial_scale : 1.f) {
  if (options.initial_scale <= 0 || options.growth_factor <= 1 || options.backoff_factor <= 0 ||
      options.backoff_factor >= 1 || options.growth_interval < 1 || options.min_scale <= 0)
    throw std::invalid_argument("loss scaler: scales must be positive, growth > 1, 0 < backoff < 1, interval >= 1");
}

bool LossScaler::update(bool gradients_finite) {
  if (!enabled_) return true;  // bf16/fp32: a non-finite gradient is the loss guard's business
  if (!gradients_finite) {
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_steps_ >= options_.growth_interval) {
    scale_ = std::min(options_.max_scale, scale_ * options_.growth_factor);
    good_steps_ = 0;
  }
  return true;
}

}  // namespace fanstore::trainer
