// Batch assembly: loads each sample with its own seed, and applies the skip_bad_samples policy.
#include "trainer/data/batch_loader.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "trainer/data/data_error.hpp"
#include "trainer/data/random_stream.hpp"

namespace fanstore::trainer::data {
namespace {

// How many samples past an all-bad batch are tried as its substitute.
constexpr std::size_t kMaxSubstituteTries = 64;

}  // namespace

BatchLoader::BatchLoader(const SampleDataset& dataset, BatchLoaderOptions options)
    : dataset_(dataset), options_(options) {}

Batch BatchLoader::load(std::size_t batch_number, std::span<const std::size_t> indices, std::uint64_t epoch) const {
  const SampleLayout& layout = dataset_.layout();
  const std::size_t count = indices.size();
  const std::size_t input_size = layout.input_elements();
  const std::size_t target_size = layout.target_elements();
  const bool integer_targets = layout.target_kind != TargetKind::kRegression;

  std::vector<std::int64_t> input_shape = {static_cast<std::int64_t>(count)};
  input_shape.insert(input_shape.end(), layout.input_shape.begin(), layout.input_shape.end());
  std::vector<std::int64_t> target_shape = {static_cast<std::int64_t>(count)};
  target_shape.insert(target_shape.end(), layout.target_shape.begin(), layout.target_shape.end());
  // The input is made in place with its memory resource (a pmr vector assigned later would keep the default one).
  std::pmr::memory_resource* memory = options_.input_memory ? options_.input_memory : std::pmr::get_default_resource();
  Batch batch{.number = batch_number,
              .sample_indices = {indices.begin(), indices.end()},
              .input_shape = std::move(input_shape),
              .input = std::pmr::vector<float>(count * input_size, memory),
              .target_kind = layout.target_kind,
              .target_shape = std::move(target_shape),
              .target_values = {},
              .target_labels = {}};
  if (integer_targets) {
    batch.target_labels.resize(count * target_size);
  } else {
    batch.target_values.resize(count * target_size);
  }

  auto buffers_of = [&](std::size_t slot) {
    SampleBuffers buffers;
    buffers.input = batch.input.data() + slot * input_size;
    if (integer_targets) {
      buffers.target_labels = batch.target_labels.data() + slot * target_size;
    } else {
      buffers.target_values = batch.target_values.data() + slot * target_size;
    }
    return buffers;
  };

  // Loads sample `index` into `slot`; false for a bad one under skip_bad_samples, with a counted warning when it
  // is one of the batch's own (a substitute that is bad is skipped silently: its own batch counts it).
  auto load_into = [&](std::size_t slot, std::size_t index, bool own) {
    try {
      dataset_.load_sample(index, mix_seed({options_.seed, epoch, index, kAugmentStream}), buffers_of(slot));
      return true;
    } catch (const DataError& error) {
      if (!options_.skip_bad_samples) throw;
      if (own)
        std::fprintf(stderr, "fanstore data: warning: skipping bad sample (%llu so far): %s\n",
                     static_cast<unsigned long long>(++bad_samples_), error.what());
      return false;
    }
  };
  std::vector<bool> good(count, true);
  bool any_good = false;
  for (std::size_t slot = 0; slot < count; ++slot) any_good |= good[slot] = load_into(slot, indices[slot], true);
  // A batch of bad samples only (at batch 1, common for 3D volumes, its one sample): the first slot takes the next
  // good sample of the dataset in index order, the same on every rank that loads this batch. Bounded: a run of
  // bad samples that long is a damaged dataset, not a few bad files.
  std::size_t tried = 0;
  for (std::size_t step = 1; count > 0 && !any_good && step < dataset_.size() && tried < kMaxSubstituteTries; ++step) {
    const std::size_t index = (indices[0] + step) % dataset_.size();
    if (std::find(indices.begin(), indices.end(), index) != indices.end()) continue;  // bad, and counted
    ++tried;
    if ((any_good = good[0] = load_into(0, index, false))) batch.sample_indices[0] = index;
  }

  // Fill each bad slot with the next good sample of the batch (wrapping): the batch keeps its
  // shape, which the model and the gradient averaging expect, and stays deterministic.
  for (std::size_t slot = 0; slot < count; ++slot) {
    if (good[slot]) continue;
    std::size_t donor = slot;
    for (std::size_t step = 1; step < count && !good[donor]; ++step) donor = (slot + step) % count;
    if (!good[donor]) {
      throw DataError(dataset_.sample_path(indices[slot]),
                      "batch " + std::to_string(batch_number) + " has no good sample, nor have the next " +
                          std::to_string(tried) + " of the dataset; nothing to substitute: check the data");
    }
    const SampleBuffers from = buffers_of(donor), to = buffers_of(slot);
    std::memcpy(to.input, from.input, input_size * sizeof(float));
    if (integer_targets) {
      std::memcpy(to.target_labels, from.target_labels, target_size * sizeof(std::int32_t));
    } else {
      std::memcpy(to.target_values, from.target_values, target_size * sizeof(float));
    }
    batch.sample_indices[slot] = batch.sample_indices[donor];
  }
  return batch;
}

}  // namespace fanstore::trainer::data
