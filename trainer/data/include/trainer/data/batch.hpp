// One assembled mini-batch: NCHW / NCDHW float inputs and the matching targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <vector>

#include "trainer/data/sample_dataset.hpp"

namespace fanstore::trainer::data {

struct Batch {
  std::size_t number = 0;                   // position of the batch in this rank's epoch
  std::vector<std::size_t> sample_indices;  // dataset indices actually in the batch, in order

  std::vector<std::int64_t> input_shape;  // (N, C, H, W) or (N, C, D, H, W)
  std::pmr::vector<float> input;          // in BatchLoaderOptions::input_memory

  TargetKind target_kind = TargetKind::kClassIndex;
  std::vector<std::int64_t> target_shape;   // (N), (N, T) or (N, D, H, W)
  std::vector<float> target_values;         // kRegression
  std::vector<std::int32_t> target_labels;  // kClassIndex, kVoxelLabels
};

}  // namespace fanstore::trainer::data
