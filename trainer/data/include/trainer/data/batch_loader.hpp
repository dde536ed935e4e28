// Assembles batches from a dataset: per-sample augmentation seeds and the skip_bad_samples policy.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory_resource>
#include <span>

#include "trainer/data/batch.hpp"
#include "trainer/data/sample_dataset.hpp"

namespace fanstore::trainer::data {

struct BatchLoaderOptions {
  std::uint64_t seed = 0;
  // false: a bad sample throws its DataError (the default: never train on silently missing data).
  // true: the bad sample's slot gets a copy of the next good sample of the same batch, one warning
  // line goes to stderr, and bad_sample_count() goes up by one. A batch with no good sample takes the
  // next good one of the dataset (index order, at most 64 tried); when there is none it throws.
  bool skip_bad_samples = false;
  // Where the batches' inputs are assembled (null: the default resource). The trainer passes its
  // backend's input memory (page-locked on a GPU), so that a batch is uploaded without another copy.
  std::pmr::memory_resource* input_memory = nullptr;
};

class BatchLoader {
 public:
  BatchLoader(const SampleDataset& dataset, BatchLoaderOptions options);

  const SampleDataset& dataset() const { return dataset_; }

  // Loads the samples `indices` of epoch `epoch`. The augmentation of sample i depends only on
  // (seed, epoch, i), so the bytes do not depend on which thread or in which order it runs.
  // Thread-safe.
  Batch load(std::size_t batch_number, std::span<const std::size_t> indices, std::uint64_t epoch) const;

  // Samples skipped so far (counted once per failed load, so a bad file counts once per epoch).
  std::uint64_t bad_sample_count() const { return bad_samples_.load(); }

 private:
  const SampleDataset& dataset_;
  BatchLoaderOptions options_;
  mutable std::atomic<std::uint64_t> bad_samples_{0};
};

}  // namespace fanstore::trainer::data
