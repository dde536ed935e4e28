// The interface every reader implements: a fixed sample shape and "load sample i into these buffers".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fanstore::trainer::data {

enum class TargetKind {
  kClassIndex,   // one int32 class per sample (image folder)
  kRegression,   // float32 values per sample (CosmoFlow's 4 parameters)
  kVoxelLabels,  // one int32 class per voxel (3D U-Net)
};

// Shapes of ONE sample, without the batch dimension: input (C,H,W) or (C,D,H,W).
struct SampleLayout {
  std::vector<std::int64_t> input_shape;
  std::vector<std::int64_t> target_shape;  // {} for a class index
  TargetKind target_kind = TargetKind::kClassIndex;

  std::size_t input_elements() const;
  std::size_t target_elements() const;
};

// Where load_sample writes: `input` has layout().input_elements() floats; exactly one of
// target_values / target_labels is used, by target_kind, with target_elements() entries.
struct SampleBuffers {
  float* input = nullptr;
  float* target_values = nullptr;
  std::int32_t* target_labels = nullptr;
};

class SampleDataset {
 public:
  virtual ~SampleDataset() = default;

  virtual std::size_t size() const = 0;
  virtual const SampleLayout& layout() const = 0;
  // The file behind sample `index`, for messages.
  virtual std::string sample_path(std::size_t index) const = 0;
  // Must be thread-safe and depend only on (index, augment_seed), so prefetch threads give the
  // same bytes in any order. Throws DataError naming the file if the sample is bad.
  virtual void load_sample(std::size_t index, std::uint64_t augment_seed, const SampleBuffers& out) const = 0;
};

}  // namespace fanstore::trainer::data
