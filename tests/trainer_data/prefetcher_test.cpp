// Prefetching: identical batches for 0, 1 and 3 threads; errors surface in order; skip_bad_samples counts.
#include <gtest/gtest.h>

#include "test_support.hpp"
#include "trainer/data/batch_loader.hpp"
#include "trainer/data/cosmoflow_dataset.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/image_folder.hpp"
#include "trainer/data/prefetcher.hpp"
#include "trainer/data/shard.hpp"

namespace fanstore::trainer::data {
namespace {

using testing::ScratchDir;

std::vector<Batch> run_epoch(const BatchLoader& loader, std::size_t batch_size, int threads, std::uint64_t epoch) {
  ShardSpec spec{.dataset_size = loader.dataset().size(),
                 .batch_size = batch_size,
                 .rank = 1,
                 .world_size = 2,
                 .seed = 11,
                 .epoch = epoch,
                 .last_batch = LastBatch::kPad};
  Prefetcher prefetcher(loader, split_into_batches(shard_indices(spec), batch_size), epoch,
                        PrefetchOptions{.threads = threads, .queue_depth = 3});
  std::vector<Batch> batches;
  while (auto batch = prefetcher.next()) batches.push_back(std::move(*batch));
  return batches;
}

void expect_same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].number, i);
    EXPECT_EQ(a[i].sample_indices, b[i].sample_indices);
    EXPECT_EQ(a[i].input_shape, b[i].input_shape);
    EXPECT_EQ(a[i].input, b[i].input) << "batch " << i;
    EXPECT_EQ(a[i].target_labels, b[i].target_labels);
    EXPECT_EQ(a[i].target_values, b[i].target_values);
  }
}

class ImageFolderPipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::run_datagen("imagefolder --samples 30 --classes 3 --size 32 --val-fraction 0 -o " + (scratch_ / "d"));
    options_.output_size = 16;
  }
  ScratchDir scratch_;
  ImageFolderOptions options_;
};

TEST_F(ImageFolderPipeline, SameBatchesForZeroOneAndThreeThreads) {
  const ImageFolderDataset dataset(scratch_ / "d/train", options_);
  const BatchLoader loader(dataset, {.seed = 3});
  const auto one = run_epoch(loader, 4, 1, 0);
  ASSERT_EQ(one.size(), 4u);  // 30 samples, 2 ranks x 4 -> ceil(30 / 8) = 4 batches each
  EXPECT_EQ(one[0].input_shape, (std::vector<std::int64_t>{4, 3, 16, 16}));
  EXPECT_EQ(one[0].target_shape, (std::vector<std::int64_t>{4}));
  for (std::size_t slot = 0; slot < 4; ++slot) {
    EXPECT_EQ(one[0].target_labels[slot], dataset.label_of(one[0].sample_indices[slot]));
  }
  expect_same_batches(one, run_epoch(loader, 4, 3, 0));
  expect_same_batches(one, run_epoch(loader, 4, 0, 0));
  // Another epoch: another order and other augmentations.
  const auto next_epoch = run_epoch(loader, 4, 3, 1);
  EXPECT_NE(one[0].sample_indices, next_epoch[0].sample_indices);
}

TEST_F(ImageFolderPipeline, CorruptJpegStopsTheEpochNamingTheFile) {
  const ImageFolderDataset dataset(scratch_ / "d/train", options_);
  const std::string bad = dataset.sample_path(7);
  testing::write_bytes(bad, std::vector<std::uint8_t>(300, 0xFF));
  const BatchLoader loader(dataset, {.seed = 3});
  ShardSpec spec{.dataset_size = dataset.size(), .batch_size = 5, .shuffle = false};
  Prefetcher prefetcher(loader, split_into_batches(shard_indices(spec), 5), 0, {.threads = 3, .queue_depth = 2});
  ASSERT_TRUE(prefetcher.next().has_value());  // batch 0 = samples 0..4
  try {
    prefetcher.next();  // batch 1 holds sample 7
    FAIL() << "corrupt JPEG was not reported";
  } catch (const DataError& error) {
    EXPECT_EQ(error.path(), bad);
    EXPECT_NE(std::string(error.what()).find("corrupt JPEG"), std::string::npos) << error.what();
  }
}  // the destructor must stop the remaining workers without hanging

TEST_F(ImageFolderPipeline, SkipBadSamplesSubstitutesAndCounts) {
  const ImageFolderDataset dataset(scratch_ / "d/train", options_);
  testing::write_bytes(dataset.sample_path(7), std::vector<std::uint8_t>(300, 0xFF));
  testing::write_bytes(dataset.sample_path(21), {});
  const BatchLoader loader(dataset, {.seed = 3, .skip_bad_samples = true});
  ShardSpec spec{.dataset_size = dataset.size(), .batch_size = 5, .shuffle = false};
  Prefetcher prefetcher(loader, split_into_batches(shard_indices(spec), 5), 0, {.threads = 2});
  std::vector<Batch> batches;
  while (auto batch = prefetcher.next()) batches.push_back(std::move(*batch));
  ASSERT_EQ(batches.size(), 6u);
  EXPECT_EQ(loader.bad_sample_count(), 2u);
  // Sample 7 (slot 2 of batch 1) is replaced by the next good one, sample 8, shape unchanged.
  EXPECT_EQ(batches[1].sample_indices, (std::vector<std::size_t>{5, 6, 8, 8, 9}));
  EXPECT_EQ(batches[1].input.size(), 5u * 3 * 16 * 16);
  const std::size_t per_sample = 3 * 16 * 16;
  EXPECT_TRUE(std::equal(batches[1].input.begin() + 2 * per_sample, batches[1].input.begin() + 3 * per_sample,
                         batches[1].input.begin() + 3 * per_sample));
  EXPECT_EQ(batches[4].sample_indices, (std::vector<std::size_t>{20, 22, 22, 23, 24}));
}

TEST_F(ImageFolderPipeline, AllBadBatchTakesTheNextGoodSampleOfTheDataset) {
  // At batch 1, common for 3D volumes, a bad sample is the whole batch: it stopped the run.
  const ImageFolderDataset dataset(scratch_ / "d/train", options_);
  for (std::size_t i : {0, 1, 3}) testing::write_bytes(dataset.sample_path(i), {});
  const BatchLoader loader(dataset, {.skip_bad_samples = true});
  const std::vector<std::size_t> both = {1, 0}, one = {3}, last = {29};
  EXPECT_EQ(loader.load(0, both, 0).sample_indices, (std::vector<std::size_t>{2, 2}));
  EXPECT_EQ(loader.bad_sample_count(), 2u);  // the batch's bad samples are not tried, nor counted, again
  const Batch b = loader.load(1, one, 0);
  EXPECT_EQ(b.sample_indices, (std::vector<std::size_t>{4}));
  EXPECT_EQ(b.input, loader.load(2, std::vector<std::size_t>{4}, 0).input);  // sample 4 as its own batch loads it
  EXPECT_EQ(loader.bad_sample_count(), 3u);
  testing::write_bytes(dataset.sample_path(29), {});
  EXPECT_EQ(loader.load(3, last, 0).sample_indices, (std::vector<std::size_t>{2}));  // wraps: 0 and 1 are bad
  EXPECT_EQ(loader.bad_sample_count(), 4u);  // bad substitutes are not counted: their own batches count them
}

TEST_F(ImageFolderPipeline, AllBadDatasetIsAnError) {
  const ImageFolderDataset dataset(scratch_ / "d/train", options_);
  for (std::size_t i = 0; i < dataset.size(); ++i) testing::write_bytes(dataset.sample_path(i), {});
  const BatchLoader loader(dataset, {.skip_bad_samples = true});
  try {
    loader.load(0, std::vector<std::size_t>{5}, 0);
    FAIL() << "a dataset of bad samples only was not reported";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("batch 0 has no good sample, nor have the next 29 of the dataset"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(loader.bad_sample_count(), 1u);
}

TEST(VolumePipeline, CosmoFlowBatchesAreThreadCountIndependent) {
  ScratchDir scratch;
  testing::run_datagen("cosmoflow --samples 9 --size 8 --val-fraction 0 -o " + (scratch / "d"));
  const CosmoFlowDataset dataset(scratch / "d/train", {});
  const BatchLoader loader(dataset, {.seed = 1});
  const auto one = run_epoch(loader, 2, 1, 5);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_EQ(one[0].input_shape, (std::vector<std::int64_t>{2, 4, 8, 8, 8}));
  EXPECT_EQ(one[0].target_shape, (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(one[0].target_values.size(), 8u);
  expect_same_batches(one, run_epoch(loader, 2, 3, 5));
}

TEST(Prefetcher, StopsEarlyWithoutHanging) {
  ScratchDir scratch;
  testing::run_datagen("cosmoflow --samples 20 --size 8 --val-fraction 0 -o " + (scratch / "d"));
  const CosmoFlowDataset dataset(scratch / "d/train", {});
  const BatchLoader loader(dataset, {});
  ShardSpec spec{.dataset_size = dataset.size(), .batch_size = 1};
  Prefetcher prefetcher(loader, split_into_batches(shard_indices(spec), 1), 0, {.threads = 3, .queue_depth = 2});
  EXPECT_EQ(prefetcher.batch_count(), 20u);
  EXPECT_TRUE(prefetcher.next().has_value());
}

}  // namespace
}  // namespace fanstore::trainer::data
