// fanstore-datagen: same seed -> same bytes (any thread count), another seed -> other bytes, layouts.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.hpp"
#include "trainer/data/hdf5_volume.hpp"

namespace fanstore::trainer::data {
namespace {

using testing::read_tree;
using testing::run_datagen;
using testing::ScratchDir;

class DatagenDeterminism : public ::testing::TestWithParam<std::string> {};

TEST_P(DatagenDeterminism, SameSeedSameBytesOtherSeedOtherBytes) {
  ScratchDir scratch;
  const std::string kind = GetParam();
  const std::string common =
      kind + " --samples 12 --size 16 --val-fraction 0.25" + (kind == "imagefolder" ? " --classes 3" : "");
  run_datagen(common + " --seed 7 -o " + (scratch / "a"));
  run_datagen(common + " --seed 7 --threads 3 -o " + (scratch / "b"));
  run_datagen(common + " --seed 8 -o " + (scratch / "c"));
  const auto a = read_tree(scratch / "a");
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a, read_tree(scratch / "b"));
  const auto c = read_tree(scratch / "c");
  ASSERT_EQ(c.size(), a.size());
  for (const auto& [name, bytes] : a) EXPECT_NE(bytes, c.at(name)) << name;
}

INSTANTIATE_TEST_SUITE_P(AllKinds, DatagenDeterminism, ::testing::Values("imagefolder", "cosmoflow", "unet3d"));

TEST(Datagen, ImageFolderLayout) {
  ScratchDir scratch;
  run_datagen("imagefolder --samples 10 --classes 2 --val-fraction 0.2 -o " + (scratch / "d"));
  namespace fs = std::filesystem;
  EXPECT_TRUE(fs::exists(scratch / "d/train/class_0000/img_0000000.jpg"));
  EXPECT_TRUE(fs::exists(scratch / "d/train/class_0001/img_0000001.jpg"));
  EXPECT_TRUE(fs::exists(scratch / "d/val/class_0000/img_0000000.jpg"));
  EXPECT_TRUE(fs::exists(scratch / "d/val/class_0001/img_0000001.jpg"));
}

TEST(Datagen, CosmoFlowLayoutMatchesMlperf) {
  ScratchDir scratch;
  run_datagen("cosmoflow --samples 2 --size 8 --val-fraction 0.5 -o " + (scratch / "d"));
  Hdf5File file(scratch / "d/train/univ_00000.h5");
  EXPECT_EQ(file.dims("full"), (std::vector<std::uint64_t>{8, 8, 8, 4}));
  EXPECT_EQ(file.dims("unitPar"), (std::vector<std::uint64_t>{4}));
  float targets[4];
  file.read_float("unitPar", {0}, {4}, targets);
  for (float t : targets) {
    EXPECT_GE(t, -1.0f);
    EXPECT_LE(t, 1.0f);
  }
  EXPECT_TRUE(std::filesystem::exists(scratch / "d/val/univ_00000.h5"));
}

TEST(Datagen, Unet3dLayout) {
  ScratchDir scratch;
  run_datagen("unet3d --samples 1 --size 12 --val-fraction 0 -o " + (scratch / "d"));
  Hdf5File file(scratch / "d/train/case_00000.h5");
  EXPECT_EQ(file.dims("image"), (std::vector<std::uint64_t>{1, 12, 12, 12}));
  EXPECT_EQ(file.dims("label"), (std::vector<std::uint64_t>{12, 12, 12}));
  std::vector<double> labels(12 * 12 * 12);
  file.read_double("label", {0, 0, 0}, {12, 12, 12}, labels.data());
  bool has_kidney = false;
  for (auto label : labels) {
    EXPECT_LE(label, 2);
    has_kidney |= label == 1;
  }
  EXPECT_TRUE(has_kidney);
  EXPECT_FALSE(std::filesystem::exists(scratch / "d/val"));
}

TEST(Datagen, RefusesNonEmptyOutputAndTooFewSamples) {
  ScratchDir scratch;
  run_datagen("unet3d --samples 1 --size 8 --val-fraction 0 -o " + (scratch / "d"));
  const std::string binary = FANSTORE_DATAGEN_BINARY;
  EXPECT_NE(testing::run_command(binary + " unet3d --samples 1 -o " + (scratch / "d") + " 2>/dev/null"), 0);
  EXPECT_NE(
      testing::run_command(binary + " imagefolder --samples 5 --classes 10 -o " + (scratch / "e") + " 2>/dev/null"), 0);
}

// --size 0 or below made a set at the default size, exit 0; now refused, nothing written.
TEST(Datagen, RefusesSizesBelowOne) {
  ScratchDir scratch;
  const std::string binary = FANSTORE_DATAGEN_BINARY;
  for (const char* size : {"0", "-8"}) {
    EXPECT_EQ(testing::run_command(binary + " cosmoflow --samples 2 --size " + size + " -o " + (scratch / "s") +
                                   " 2>/dev/null"),
              1)
        << size;
    EXPECT_FALSE(std::filesystem::exists(scratch / "s")) << size;
  }
}

}  // namespace
}  // namespace fanstore::trainer::data
