// Image-folder scanning and loading: labels by sorted class, shapes, and the bad-tree errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "test_support.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/image_folder.hpp"

namespace fanstore::trainer::data {
namespace {

using testing::ScratchDir;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const DataError& error) {
    return error.what();
  }
  return "<no DataError>";
}

TEST(ImageFolder, ScansSortedClassesAndLoadsNormalisedCrops) {
  ScratchDir scratch;
  testing::run_datagen("imagefolder --samples 9 --classes 3 --size 40 --val-fraction 0 -o " + (scratch / "d"));
  std::filesystem::create_directories(scratch / "d/train/.hidden");  // ignored, like dot files
  ImageFolderOptions options;
  options.output_size = 24;
  const ImageFolderDataset dataset(scratch / "d/train", options);
  ASSERT_EQ(dataset.class_names(), (std::vector<std::string>{"class_0000", "class_0001", "class_0002"}));
  ASSERT_EQ(dataset.size(), 9u);
  EXPECT_EQ(dataset.label_of(0), 0);
  EXPECT_EQ(dataset.label_of(8), 2);
  EXPECT_EQ(dataset.layout().input_shape, (std::vector<std::int64_t>{3, 24, 24}));

  std::vector<float> input(3 * 24 * 24);
  std::int32_t label = -1;
  dataset.load_sample(4, 77, SampleBuffers{input.data(), nullptr, &label});
  EXPECT_EQ(label, 1);
  for (float v : input) {  // (0 - 0.485) / 0.229 .. (1 - 0.406) / 0.225
    ASSERT_GE(v, -2.2f);
    ASSERT_LE(v, 2.7f);
  }
  std::vector<float> again(input.size()), other(input.size());
  dataset.load_sample(4, 77, SampleBuffers{again.data(), nullptr, &label});
  dataset.load_sample(4, 78, SampleBuffers{other.data(), nullptr, &label});
  EXPECT_EQ(input, again);
  EXPECT_NE(input, other);

  options.training = false;
  const ImageFolderDataset validation(scratch / "d/train", options);
  std::vector<float> val_a(input.size()), val_b(input.size());
  validation.load_sample(4, 1, SampleBuffers{val_a.data(), nullptr, &label});
  validation.load_sample(4, 2, SampleBuffers{val_b.data(), nullptr, &label});
  EXPECT_EQ(val_a, val_b);  // no randomness in validation
}

TEST(ImageFolder, RegionIsTheSameSlabOfTheSameAugmentedImage) {
  // Spatial parallelism: each rank keeps rows [y0,y1) x columns [x0,x1) of the one augmented image.
  ScratchDir scratch;
  testing::run_datagen("imagefolder --samples 3 --classes 3 --size 40 --val-fraction 0 -o " + (scratch / "d"));
  ImageFolderOptions options;
  options.output_size = 20;
  const ImageFolderDataset whole(scratch / "d/train", options);
  options.region = Slab{0, 1, 5, 13, 2, 20};
  const ImageFolderDataset part(scratch / "d/train", options);
  EXPECT_EQ(part.layout().input_shape, (std::vector<std::int64_t>{3, 8, 18}));
  std::vector<float> image(3 * 20 * 20), slab(3 * 8 * 18);
  std::int32_t label = -1;
  whole.load_sample(1, 99, SampleBuffers{image.data(), nullptr, &label});
  part.load_sample(1, 99, SampleBuffers{slab.data(), nullptr, &label});
  std::size_t i = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 5; y < 13; ++y)
      for (int x = 2; x < 20; ++x) ASSERT_EQ(slab[i++], image[(c * 20 + y) * 20 + x]);
  options.region = Slab{0, 1, 15, 21, 0, 4};
  EXPECT_NE(error_of([&] { ImageFolderDataset(scratch / "d/train", options); }).find("outside the 20x20 image"),
            std::string::npos);
}

TEST(ImageFolder, EmptyClassIsAnErrorNamingTheDirectory) {
  ScratchDir scratch;
  testing::run_datagen("imagefolder --samples 4 --classes 2 --val-fraction 0 -o " + (scratch / "d"));
  std::filesystem::create_directories(scratch / "d/train/class_0005");
  const std::string message = error_of([&] { ImageFolderDataset(scratch / "d/train", {}); });
  EXPECT_NE(message.find(scratch / "d/train/class_0005"), std::string::npos) << message;
  EXPECT_NE(message.find("no .jpg"), std::string::npos) << message;
}

TEST(ImageFolder, MissingRootAndRootWithoutClassesAreErrors) {
  ScratchDir scratch;
  std::string message = error_of([&] { ImageFolderDataset(scratch / "missing", {}); });
  EXPECT_NE(message.find(scratch / "missing"), std::string::npos) << message;
  message = error_of([&] { ImageFolderDataset(scratch.path(), {}); });
  EXPECT_NE(message.find("no class directories"), std::string::npos) << message;
}

}  // namespace
}  // namespace fanstore::trainer::data
