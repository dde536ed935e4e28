// Checkpoint round trip, atomic replacement, and the one-line errors for damaged or foreign files.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "small_models.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/models.hpp"

namespace fanstore::trainer {
namespace {

std::string temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("fanstore_ckpt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST(Checkpoint, RoundTripRestoresEverything) {
  auto a = small_cosmoflow(1);
  OptimizerOptions oo;
  oo.kind = "adam";
  auto opt_a = make_optimizer(a->parameters(), oo);
  for (std::size_t i = 0; i < a->parameters().parameter_count(); ++i) a->parameters().gradients()[i] = 1e-3f;
  opt_a->step(a->parameters(), 0.01f);
  TrainingPosition p{7, 2, 3, 42, 2, 8};
  const std::string path = temp_dir() + "/checkpoint.bin";
  save_checkpoint(path, *a, *opt_a, p);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  auto b = small_cosmoflow(2);  // different initial weights
  auto opt_b = make_optimizer(b->parameters(), oo);
  const TrainingPosition q = load_checkpoint(path, *b, *opt_b);
  EXPECT_EQ(q.global_step, 7u);
  EXPECT_EQ(q.epoch, 2u);
  EXPECT_EQ(q.next_batch, 3u);
  EXPECT_EQ(q.seed, 42u);
  EXPECT_EQ(opt_b->steps_taken(), 1u);
  const auto n = a->parameters().parameter_count();
  EXPECT_EQ(0, std::memcmp(a->parameters().values(), b->parameters().values(), n * sizeof(float)));
  auto sa = opt_a->state(), sb = opt_b->state();
  ASSERT_EQ(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    ASSERT_EQ(sa[i].second.numel(), sb[i].second.numel());
    EXPECT_EQ(0, std::memcmp(sa[i].second.data(), sb[i].second.data(), sa[i].second.bytes())) << sa[i].first;
  }
}

// A write that fails half-way (here the file size limit; on a cluster a full disk) leaves the old checkpoint and
// no partial checkpoint.bin.tmp (it used to stay behind, taking the space).
TEST(Checkpoint, FailedWriteRemovesItsTemporaryFile) {
  auto a = small_cosmoflow(1);
  auto opt = make_optimizer(a->parameters(), OptimizerOptions{});
  const std::string path = temp_dir() + "/limited.bin";
  std::filesystem::remove(path);
  rlimit old{};
  ASSERT_EQ(0, ::getrlimit(RLIMIT_FSIZE, &old));
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
  rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(0, ::setrlimit(RLIMIT_FSIZE, &small));
  std::string message;
  try {
    save_checkpoint(path, *a, *opt, TrainingPosition{});
  } catch (const CheckpointError& e) {
    message = e.what();
  }
  ASSERT_EQ(0, ::setrlimit(RLIMIT_FSIZE, &old));
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("write failed"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

// --resume on another batching: the epoch's samples done, over the new global batch, rounded down.
TEST(Checkpoint, RebatchKeepsTheSamplesDone) {
  // 1 group x 2, 6 steps of 20 per epoch (12 samples), to 1 x 8 with 5 steps per epoch: batch 1 (8 samples).
  TrainingPosition p{6, 0, 6, 9, 1, 2};
  TrainingPosition q = rebatch_position(p, 1, 8, 5);
  EXPECT_EQ(q.epoch, 0u);
  EXPECT_EQ(q.next_batch, 1u);
  EXPECT_EQ(q.global_step, 1u);
  EXPECT_EQ(q.world_size, 1u);
  EXPECT_EQ(q.batch_per_rank, 8u);
  EXPECT_EQ(q.seed, 9u);
  // 1 x 2 after 4 of 10 steps (8 samples) to 2 x 2 with 5 steps: batch 2 of epoch 0.
  q = rebatch_position(TrainingPosition{4, 0, 4, 9, 1, 2}, 2, 2, 5);
  EXPECT_EQ(q.next_batch, 2u);
  EXPECT_EQ(q.global_step, 2u);
  // The epoch is done in the new batching (8 samples of 8 per epoch): the next epoch's start, not a batch past
  // the end (which crashed, or ended the epoch with no step and a NaN loss).
  q = rebatch_position(TrainingPosition{14, 3, 4, 9, 1, 2}, 2, 2, 2);
  EXPECT_EQ(q.epoch, 4u);
  EXPECT_EQ(q.next_batch, 0u);
  EXPECT_EQ(q.global_step, 8u);
  // A smaller global batch: 3 x 4 x 2 = 24 samples, 5 steps of 5.
  q = rebatch_position(TrainingPosition{7, 1, 3, 9, 2, 4}, 1, 5, 9);
  EXPECT_EQ(q.epoch, 1u);
  EXPECT_EQ(q.next_batch, 4u);
  EXPECT_EQ(q.global_step, 13u);
}

TEST(Checkpoint, DamagedOrForeignFilesGiveOneLineErrors) {
  auto a = small_cosmoflow(1);
  auto opt = make_optimizer(a->parameters(), OptimizerOptions{});
  const std::string dir = temp_dir(), path = dir + "/c.bin";
  save_checkpoint(path, *a, *opt, TrainingPosition{});

  // Flip one byte in the middle: the checksum catches it.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x55');
  }
  try {
    load_checkpoint(path, *a, *opt);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  std::ofstream(dir + "/junk.bin") << "definitely not a checkpoint, but long enough to read";
  EXPECT_THROW(load_checkpoint(dir + "/junk.bin", *a, *opt), CheckpointError);
  EXPECT_THROW(load_checkpoint(dir + "/missing.bin", *a, *opt), CheckpointError);

  // Another optimizer's checkpoint is refused with the option to fix.
  save_checkpoint(path, *a, *opt, TrainingPosition{});
  OptimizerOptions adam;
  adam.kind = "adam";
  auto other = make_optimizer(a->parameters(), adam);
  try {
    load_checkpoint(path, *a, *other);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("--optimizer sgd"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fanstore::trainer
