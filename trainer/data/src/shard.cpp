// Epoch permutation (Fisher-Yates on a portable stream), drop/pad to whole global batches, strided shards.
#include "trainer/data/shard.hpp"

#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "trainer/data/random_stream.hpp"

namespace fanstore::trainer::data {

std::vector<std::size_t> epoch_permutation(std::size_t dataset_size, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::size_t> order(dataset_size);
  std::iota(order.begin(), order.end(), std::size_t{0});
  RandomStream rng(mix_seed({seed, epoch, kShuffleStream}));
  for (std::size_t i = dataset_size; i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

std::vector<std::size_t> shard_indices(const ShardSpec& spec) {
  if (spec.dataset_size == 0) throw std::invalid_argument("shard_indices: the dataset is empty");
  if (spec.batch_size == 0) throw std::invalid_argument("shard_indices: batch_size must be positive");
  if (spec.world_size <= 0 || spec.rank < 0 || spec.rank >= spec.world_size) {
    throw std::invalid_argument("shard_indices: rank " + std::to_string(spec.rank) + " is outside world size " +
                                std::to_string(spec.world_size));
  }
  std::vector<std::size_t> order;
  if (spec.shuffle) {
    order = epoch_permutation(spec.dataset_size, spec.seed, spec.epoch);
  } else {
    order.resize(spec.dataset_size);
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  const std::size_t world = static_cast<std::size_t>(spec.world_size);
  const std::size_t global_batch = world * spec.batch_size;
  std::size_t used_positions = 0;
  if (spec.last_batch == LastBatch::kDrop) {
    used_positions = spec.dataset_size / global_batch * global_batch;
    if (used_positions == 0) {
      throw std::invalid_argument("shard_indices: " + std::to_string(spec.dataset_size) +
                                  " samples are fewer than one global batch (" + std::to_string(global_batch) +
                                  "); use LastBatch::kPad or a smaller batch");
    }
  } else {
    used_positions = (spec.dataset_size + global_batch - 1) / global_batch * global_batch;
  }
  std::vector<std::size_t> shard;
  shard.reserve(used_positions / world);
  for (std::size_t position = static_cast<std::size_t>(spec.rank); position < used_positions; position += world) {
    shard.push_back(order[position % spec.dataset_size]);  // % only wraps in kPad
  }
  return shard;
}

std::vector<std::vector<std::size_t>> split_into_batches(const std::vector<std::size_t>& shard,
                                                         std::size_t batch_size) {
  if (batch_size == 0) throw std::invalid_argument("split_into_batches: batch_size must be positive");
  std::vector<std::vector<std::size_t>> batches;
  for (std::size_t begin = 0; begin < shard.size(); begin += batch_size) {
    const std::size_t end = std::min(shard.size(), begin + batch_size);
    batches.emplace_back(shard.begin() + static_cast<std::ptrdiff_t>(begin),
                         shard.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return batches;
}

}  // namespace fanstore::trainer::data
