// The seeded epoch shuffle shared by all ranks, and this rank's shard of it cut into batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fanstore::trainer::data {

enum class LastBatch {
  // Use only the first floor(N / (world * batch)) * world * batch positions of the permutation:
  // every rank gets the same number of full batches and no sample is seen twice in an epoch.
  kDrop,
  // Extend the permutation by wrapping around to its start up to ceil(N / (world * batch)) *
  // world * batch positions: every sample is seen, a few twice, all batches full.
  kPad,
};

struct ShardSpec {
  std::size_t dataset_size = 0;
  std::size_t batch_size = 1;  // per rank
  int rank = 0;                // the sample-parallel rank (spatial ranks of one group share it)
  int world_size = 1;          // the number of sample-parallel ranks
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  bool shuffle = true;  // false: identity order (validation)
  LastBatch last_batch = LastBatch::kDrop;
};

// The permutation of 0..n-1 for (seed, epoch): a Fisher-Yates shuffle on RandomStream, so it is
// the same on every rank with no communication.
std::vector<std::size_t> epoch_permutation(std::size_t dataset_size, std::uint64_t seed, std::uint64_t epoch);

// This rank's sample indices in order: positions rank, rank + world, rank + 2*world, ... of the
// (dropped or padded) permutation. Throws std::invalid_argument for an empty dataset, a zero batch,
// a bad rank, or kDrop with fewer than world * batch samples.
std::vector<std::size_t> shard_indices(const ShardSpec& spec);

// Cuts a shard into consecutive batches of batch_size (the shard is already a multiple of it).
std::vector<std::vector<std::size_t>> split_into_batches(const std::vector<std::size_t>& shard, std::size_t batch_size);

}  // namespace fanstore::trainer::data
