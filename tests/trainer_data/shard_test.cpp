// Shuffle and shard rules: same permutation everywhere, disjoint shards covering the data, drop vs pad.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "trainer/data/shard.hpp"

namespace fanstore::trainer::data {
namespace {

std::vector<std::vector<std::size_t>> all_shards(ShardSpec spec) {
  std::vector<std::vector<std::size_t>> shards;
  for (int rank = 0; rank < spec.world_size; ++rank) {
    spec.rank = rank;
    shards.push_back(shard_indices(spec));
  }
  return shards;
}

TEST(Shuffle, PermutationDependsOnlyOnSeedAndEpoch) {
  const auto a = epoch_permutation(1000, 42, 3);
  EXPECT_EQ(a, epoch_permutation(1000, 42, 3));
  EXPECT_NE(a, epoch_permutation(1000, 42, 4));
  EXPECT_NE(a, epoch_permutation(1000, 43, 3));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
  // Pinned: if this changes, runs resumed from a checkpoint would see a different sample order,
  // and ranks built by different compilers could disagree.
  EXPECT_EQ(epoch_permutation(8, 1, 0), (std::vector<std::size_t>{4, 6, 3, 0, 5, 1, 2, 7}));
}

TEST(Shard, DisjointShardsCoverEverythingWhenDivisible) {
  for (const LastBatch policy : {LastBatch::kDrop, LastBatch::kPad}) {
    ShardSpec spec{.dataset_size = 96, .batch_size = 4, .world_size = 4, .seed = 9, .epoch = 2, .last_batch = policy};
    const auto shards = all_shards(spec);
    std::multiset<std::size_t> seen;
    for (const auto& shard : shards) {
      EXPECT_EQ(shard.size(), 24u);
      seen.insert(shard.begin(), shard.end());
    }
    EXPECT_EQ(seen.size(), 96u);
    EXPECT_EQ(std::set<std::size_t>(seen.begin(), seen.end()).size(), 96u);  // disjoint and complete
  }
}

TEST(Shard, RanksInterleaveTheSamePermutation) {
  ShardSpec spec{.dataset_size = 50, .batch_size = 3, .world_size = 3, .seed = 5, .epoch = 1};
  const auto permutation = epoch_permutation(50, 5, 1);
  const auto shards = all_shards(spec);
  for (int rank = 0; rank < 3; ++rank) {
    for (std::size_t k = 0; k < shards[rank].size(); ++k) {
      ASSERT_EQ(shards[rank][k], permutation[rank + 3 * k]);
    }
  }
}

TEST(Shard, DropUsesWholeGlobalBatchesOnly) {
  ShardSpec spec{.dataset_size = 50, .batch_size = 4, .world_size = 3, .seed = 1, .epoch = 0};
  const auto shards = all_shards(spec);  // 50 / 12 = 4 global batches = 48 samples
  std::set<std::size_t> seen;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard.size(), 16u);
    seen.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(seen.size(), 48u);  // disjoint
  spec.dataset_size = 11;       // less than one global batch
  EXPECT_THROW(shard_indices(spec), std::invalid_argument);
}

TEST(Shard, PadCoversEverySampleAndRepeatsOnlyTheWrap) {
  ShardSpec spec{
      .dataset_size = 50, .batch_size = 4, .world_size = 3, .seed = 1, .epoch = 0, .last_batch = LastBatch::kPad};
  const auto shards = all_shards(spec);  // ceil(50 / 12) = 5 global batches = 60 positions
  std::multiset<std::size_t> seen;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard.size(), 20u);
    seen.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(std::set<std::size_t>(seen.begin(), seen.end()).size(), 50u);
  const auto permutation = epoch_permutation(50, 1, 0);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(seen.count(permutation[i]), 2u);  // the 10 padded positions
  spec.dataset_size = 2;                                                           // tiny datasets wrap several times
  spec.rank = 2;
  EXPECT_EQ(shard_indices(spec).size(), 4u);
}

TEST(Shard, NoShuffleIsIdentityOrderForValidation) {
  ShardSpec spec{
      .dataset_size = 10, .batch_size = 2, .rank = 1, .world_size = 2, .shuffle = false, .last_batch = LastBatch::kPad};
  EXPECT_EQ(shard_indices(spec), (std::vector<std::size_t>{1, 3, 5, 7, 9, 1}));
  const auto batches = split_into_batches(shard_indices(spec), 2);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2], (std::vector<std::size_t>{9, 1}));
}

TEST(Shard, RejectsBadArguments) {
  EXPECT_THROW(shard_indices({.dataset_size = 0}), std::invalid_argument);
  EXPECT_THROW(shard_indices({.dataset_size = 4, .batch_size = 0}), std::invalid_argument);
  EXPECT_THROW(shard_indices({.dataset_size = 4, .rank = 2, .world_size = 2}), std::invalid_argument);
}

}  // namespace
}  // namespace fanstore::trainer::data
