// HDF5 volume readers: slab reads equal slices of the full read, log transform, and bad-file errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "hdf5_writer.hpp"
#include "test_support.hpp"
#include "trainer/data/cosmoflow_dataset.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/unet3d_dataset.hpp"

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

constexpr int kEdge = 12;
const Slab kSlab{2, 7, 3, 12, 0, 5};

TEST(Hdf5File, HyperslabEqualsSliceOfFullRead) {
  ScratchDir scratch;
  testing::run_datagen("cosmoflow --samples 1 --size 12 --val-fraction 0 -o " + (scratch / "d"));
  const Hdf5File file(scratch / "d/train/univ_00000.h5");
  std::vector<float> full(kEdge * kEdge * kEdge * 4);
  file.read_float("full", {0, 0, 0, 0}, {kEdge, kEdge, kEdge, 4}, full.data());
  std::vector<float> part(5 * 9 * 5 * 2);
  file.read_float("full", {2, 3, 0, 1}, {5, 9, 5, 2}, part.data());
  std::size_t i = 0;
  for (int z = 2; z < 7; ++z)
    for (int y = 3; y < 12; ++y)
      for (int x = 0; x < 5; ++x)
        for (int c = 1; c < 3; ++c) ASSERT_EQ(part[i++], full[((z * kEdge + y) * kEdge + x) * 4 + c]);
  EXPECT_NE(error_of([&] {
              file.read_float("full", {8, 0, 0, 0}, {5, 1, 1, 1}, part.data());
            }).find("outside"),
            std::string::npos);
}

TEST(CosmoFlow, SlabSampleEqualsSliceOfWholeSampleAndAppliesLog) {
  ScratchDir scratch;
  testing::run_datagen("cosmoflow --samples 2 --size 12 --val-fraction 0 -o " + (scratch / "d"));
  const CosmoFlowDataset whole(scratch / "d/train", {});
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole.layout().input_shape, (std::vector<std::int64_t>{4, kEdge, kEdge, kEdge}));
  EXPECT_EQ(whole.layout().target_shape, (std::vector<std::int64_t>{4}));
  std::vector<float> volume(4 * kEdge * kEdge * kEdge), targets(4);
  whole.load_sample(1, 0, SampleBuffers{volume.data(), targets.data(), nullptr});

  CosmoFlowOptions slab_options;
  slab_options.slab = kSlab;
  const CosmoFlowDataset sliced(scratch / "d/train", slab_options);
  EXPECT_EQ(sliced.layout().input_shape, (std::vector<std::int64_t>{4, 5, 9, 5}));
  std::vector<float> slab(4 * 5 * 9 * 5), slab_targets(4);
  sliced.load_sample(1, 0, SampleBuffers{slab.data(), slab_targets.data(), nullptr});
  EXPECT_EQ(slab_targets, targets);
  std::size_t i = 0;
  for (int c = 0; c < 4; ++c)
    for (int z = kSlab.z0; z < kSlab.z1; ++z)
      for (int y = kSlab.y0; y < kSlab.y1; ++y)
        for (int x = kSlab.x0; x < kSlab.x1; ++x)
          ASSERT_EQ(slab[i++], volume[((c * kEdge + z) * kEdge + y) * kEdge + x]);

  // log(1 + x) of the stored (channels-last) counts.
  const Hdf5File file(scratch / "d/train/univ_00001.h5");
  std::vector<float> raw(kEdge * kEdge * kEdge * 4);
  file.read_float("full", {0, 0, 0, 0}, {kEdge, kEdge, kEdge, 4}, raw.data());
  const int z = 3, y = 4, x = 5, c = 2;
  EXPECT_FLOAT_EQ(volume[((c * kEdge + z) * kEdge + y) * kEdge + x],
                  std::log1p(raw[((z * kEdge + y) * kEdge + x) * 4 + c]));
}

TEST(Unet3d, SlabSampleEqualsSliceOfWholeSample) {
  ScratchDir scratch;
  testing::run_datagen("unet3d --samples 2 --size 12 --val-fraction 0 -o " + (scratch / "d"));
  const Unet3dDataset whole(scratch / "d/train", {});
  EXPECT_EQ(whole.layout().input_shape, (std::vector<std::int64_t>{1, kEdge, kEdge, kEdge}));
  EXPECT_EQ(whole.layout().target_kind, TargetKind::kVoxelLabels);
  std::vector<float> image(kEdge * kEdge * kEdge);
  std::vector<std::int32_t> labels(image.size());
  whole.load_sample(0, 0, SampleBuffers{image.data(), nullptr, labels.data()});

  Unet3dOptions slab_options;
  slab_options.slab = kSlab;
  const Unet3dDataset sliced(scratch / "d/train", slab_options);
  std::vector<float> slab_image(5 * 9 * 5);
  std::vector<std::int32_t> slab_labels(slab_image.size());
  sliced.load_sample(0, 0, SampleBuffers{slab_image.data(), nullptr, slab_labels.data()});
  std::size_t i = 0;
  for (int z = kSlab.z0; z < kSlab.z1; ++z)
    for (int y = kSlab.y0; y < kSlab.y1; ++y)
      for (int x = kSlab.x0; x < kSlab.x1; ++x, ++i) {
        ASSERT_EQ(slab_image[i], image[(z * kEdge + y) * kEdge + x]);
        ASSERT_EQ(slab_labels[i], labels[(z * kEdge + y) * kEdge + x]);
      }

  // A rank of a spatial split reads its image slab with the first layer's halo but only its own labels.
  slab_options.label_slab = Slab{3, 6, 4, 11, 1, 4};
  const Unet3dDataset haloed(scratch / "d/train", slab_options);
  EXPECT_EQ(haloed.layout().input_shape, (std::vector<std::int64_t>{1, 5, 9, 5}));
  EXPECT_EQ(haloed.layout().target_shape, (std::vector<std::int64_t>{3, 7, 3}));
  std::vector<std::int32_t> own_labels(3 * 7 * 3);
  haloed.load_sample(0, 0, SampleBuffers{slab_image.data(), nullptr, own_labels.data()});
  i = 0;
  for (int z = 3; z < 6; ++z)
    for (int y = 4; y < 11; ++y)
      for (int x = 1; x < 4; ++x) ASSERT_EQ(own_labels[i++], labels[(z * kEdge + y) * kEdge + x]);
}

TEST(VolumeErrors, CorruptOrTruncatedHdf5NamesTheFile) {
  ScratchDir scratch;
  testing::run_datagen("cosmoflow --samples 3 --size 8 --val-fraction 0 -o " + (scratch / "d"));
  const CosmoFlowDataset dataset(scratch / "d/train", {});
  const std::string garbage = scratch / "d/train/univ_00001.h5";
  testing::write_bytes(garbage, std::vector<std::uint8_t>(4096, 0x5A));
  const std::string truncated = scratch / "d/train/univ_00002.h5";
  auto bytes = testing::read_bytes(truncated);
  bytes.resize(bytes.size() / 3);
  testing::write_bytes(truncated, bytes);
  std::vector<float> volume(4 * 8 * 8 * 8), targets(4);
  for (std::size_t index : {1, 2}) {
    const std::string message = error_of([&] {
      dataset.load_sample(index, 0, SampleBuffers{volume.data(), targets.data(), nullptr});
    });
    EXPECT_NE(message.find(dataset.sample_path(index)), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    // HDF5's own reason (it was lost to a later call's reset of the error stack).
    EXPECT_EQ(message.find("unknown HDF5 error"), std::string::npos) << message;
    if (index == 1) {
      EXPECT_NE(message.find("(file signature not found)"), std::string::npos) << message;
    }
  }
}

// A file removed after the data was listed is missing, not damaged (it was "not a readable HDF5 file").
TEST(VolumeErrors, AFileRemovedAfterListingIsSaidToBeMissing) {
  ScratchDir scratch;
  testing::run_datagen("cosmoflow --samples 2 --size 8 --val-fraction 0 -o " + (scratch / "d"));
  const CosmoFlowDataset dataset(scratch / "d/train", {});
  std::filesystem::remove(dataset.sample_path(1));
  std::vector<float> volume(4 * 8 * 8 * 8), targets(4);
  const std::string message = error_of([&] {
    dataset.load_sample(1, 0, SampleBuffers{volume.data(), targets.data(), nullptr});
  });
  EXPECT_NE(message.find(dataset.sample_path(1) + ": cannot open: No such file or directory"), std::string::npos)
      << message;
}

TEST(VolumeErrors, WrongDatasetNamesAndShapesNameTheFile) {
  ScratchDir scratch;
  std::filesystem::create_directories(scratch / "names");
  {
    datagen::Hdf5Writer writer(scratch / "names/a.h5");
    writer.write_float32("volume", {4, 4, 4, 4}, std::vector<float>(256));
    writer.write_float32("unitPar", {4}, std::vector<float>(4));
    writer.close();
  }
  std::string message = error_of([&] { CosmoFlowDataset(scratch / "names", {}); });
  EXPECT_NE(message.find(scratch / "names/a.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("no dataset 'full'"), std::string::npos) << message;

  std::filesystem::create_directories(scratch / "shapes");
  for (const char* name : {"a.h5", "b.h5"}) {
    datagen::Hdf5Writer writer(scratch / "shapes/" + name);
    const bool wrong = std::string(name) == "b.h5";
    writer.write_float32("image", {1, 4, 4, wrong ? 5u : 4u}, std::vector<float>(wrong ? 80 : 64));
    writer.write_uint8("label", {4, 4, 4}, std::vector<std::uint8_t>(64));
    writer.close();
  }
  const Unet3dDataset unet(scratch / "shapes", {});
  std::vector<float> image(64);
  std::vector<std::int32_t> labels(64);
  message = error_of([&] { unet.load_sample(1, 0, SampleBuffers{image.data(), nullptr, labels.data()}); });
  EXPECT_NE(message.find(scratch / "shapes/b.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("(1, 4, 4, 5)"), std::string::npos) << message;

  Unet3dOptions too_big;
  too_big.slab = Slab{0, 5, 0, 4, 0, 4};
  message = error_of([&] { Unet3dDataset(scratch / "shapes", too_big); });
  EXPECT_NE(message.find("outside the volume"), std::string::npos) << message;
}

TEST(VolumeErrors, AUnetLabelOutsideTheClassesNamesTheFileAndTheVoxel) {
  ScratchDir scratch;
  std::filesystem::create_directories(scratch / "labels");
  std::vector<std::uint8_t> labels(64, 2);
  labels[(1 * 4 + 2) * 4 + 3] = 200;  // (z 1, y 2, x 3)
  {
    datagen::Hdf5Writer writer(scratch / "labels/a.h5");
    writer.write_float32("image", {1, 4, 4, 4}, std::vector<float>(64));
    writer.write_uint8("label", {4, 4, 4}, labels);
    writer.close();
  }
  std::vector<float> image(64);
  std::vector<std::int32_t> got(64);
  const Unet3dDataset three(scratch / "labels", {});
  std::string message = error_of([&] { three.load_sample(0, 0, SampleBuffers{image.data(), nullptr, got.data()}); });
  EXPECT_NE(message.find(scratch / "labels/a.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("label 200 at (1, 2, 3), not a whole number in 0..2"), std::string::npos) << message;
  // A slab without the bad voxel reads; one with it names the voxel in the file's coordinates.
  Unet3dOptions slab;
  slab.slab = Slab{0, 1, 0, 4, 0, 4};
  EXPECT_NO_THROW(
      Unet3dDataset(scratch / "labels", slab).load_sample(0, 0, SampleBuffers{image.data(), nullptr, got.data()}));
  slab.slab = Slab{1, 2, 2, 4, 3, 4};
  message = error_of([&] {
    Unet3dDataset(scratch / "labels", slab).load_sample(0, 0, SampleBuffers{image.data(), nullptr, got.data()});
  });
  EXPECT_NE(message.find("at (1, 2, 3)"), std::string::npos) << message;
  // Two classes: every label 2 is out.
  Unet3dOptions two;
  two.classes = 2;
  message = error_of([&] {
    Unet3dDataset(scratch / "labels", two).load_sample(0, 0, SampleBuffers{image.data(), nullptr, got.data()});
  });
  EXPECT_NE(message.find("label 2 at (0, 0, 0), not a whole number in 0..1 (--classes 2)"), std::string::npos)
      << message;
}

// Labels stored as floats: whole ones read, and one that is not is an error, not truncated to a class (0.9 was 0).
TEST(VolumeErrors, AUnetLabelThatIsNotAWholeNumberIsAnError) {
  ScratchDir scratch;
  std::filesystem::create_directories(scratch / "labels");
  std::vector<float> labels(64, 1.0f);
  {
    datagen::Hdf5Writer writer(scratch / "labels/a.h5");
    writer.write_float32("image", {1, 4, 4, 4}, std::vector<float>(64));
    writer.write_float32("label", {4, 4, 4}, labels);
    writer.close();
  }
  std::vector<float> image(64);
  std::vector<std::int32_t> got(64, -1);
  EXPECT_NO_THROW(
      Unet3dDataset(scratch / "labels", {}).load_sample(0, 0, SampleBuffers{image.data(), nullptr, got.data()}));
  EXPECT_EQ(got, std::vector<std::int32_t>(64, 1));
  labels[(2 * 4 + 0) * 4 + 1] = 0.9f;  // (z 2, y 0, x 1)
  {
    datagen::Hdf5Writer writer(scratch / "labels/a.h5");
    writer.write_float32("image", {1, 4, 4, 4}, std::vector<float>(64));
    writer.write_float32("label", {4, 4, 4}, labels);
    writer.close();
  }
  const std::string message = error_of([&] {
    Unet3dDataset(scratch / "labels", {}).load_sample(0, 0, SampleBuffers{image.data(), nullptr, got.data()});
  });
  EXPECT_NE(message.find("label 0.9 at (2, 0, 1), not a whole number in 0..2 (--classes 3)"), std::string::npos)
      << message;
}

TEST(VolumeErrors, ANonFiniteValueNamesTheFileAndWhere) {
  ScratchDir scratch;
  std::filesystem::create_directories(scratch / "cosmo");
  auto write_cosmo = [&](float voxel, float target) {
    std::vector<float> full(4 * 4 * 4 * 4, 1.f);
    full[((1 * 4 + 2) * 4 + 3) * 4 + 1] = voxel;  // (z 1, y 2, x 3, channel 1), channels last
    datagen::Hdf5Writer writer(scratch / "cosmo/a.h5");
    writer.write_float32("full", {4, 4, 4, 4}, full);
    writer.write_float32("unitPar", {4}, {0.f, target, 0.f, 0.f});
    writer.close();
  };
  std::vector<float> volume(4 * 4 * 4 * 4), targets(4);
  auto load = [&] {
    CosmoFlowDataset(scratch / "cosmo", {}).load_sample(0, 0, SampleBuffers{volume.data(), targets.data(), nullptr});
  };
  write_cosmo(NAN, 0.f);
  std::string message = error_of(load);
  EXPECT_NE(message.find("holds nan at (1, 2, 3, 1): the volume must be finite"), std::string::npos) << message;
  write_cosmo(-5.f, 0.f);  // log(1 + x) of a count below -1
  message = error_of(load);
  EXPECT_NE(message.find("whose log(1 + x) is not finite"), std::string::npos) << message;
  write_cosmo(1.f, INFINITY);
  message = error_of(load);
  EXPECT_NE(message.find("'unitPar' holds inf at 1"), std::string::npos) << message;
  EXPECT_NE(message.find(scratch / "cosmo/a.h5"), std::string::npos) << message;
  write_cosmo(1.f, 0.f);
  EXPECT_NO_THROW(load());

  std::filesystem::create_directories(scratch / "unet");
  {
    std::vector<float> image(64, 0.5f);
    image[17] = NAN;
    datagen::Hdf5Writer writer(scratch / "unet/a.h5");
    writer.write_float32("image", {1, 4, 4, 4}, image);
    writer.write_uint8("label", {4, 4, 4}, std::vector<std::uint8_t>(64));
    writer.close();
  }
  std::vector<float> image(64);
  std::vector<std::int32_t> labels(64);
  message = error_of([&] {
    Unet3dDataset(scratch / "unet", {}).load_sample(0, 0, SampleBuffers{image.data(), nullptr, labels.data()});
  });
  EXPECT_NE(message.find("'image' holds nan"), std::string::npos) << message;
}

TEST(VolumeErrors, MissingOrEmptyDirectory) {
  ScratchDir scratch;
  std::string message = error_of([&] { CosmoFlowDataset(scratch / "missing", {}); });
  EXPECT_NE(message.find(scratch / "missing"), std::string::npos) << message;
  message = error_of([&] { Unet3dDataset(scratch.path(), {}); });
  EXPECT_NE(message.find("no .h5/.hdf5 files"), std::string::npos) << message;
}

}  // namespace
}  // namespace fanstore::trainer::data
