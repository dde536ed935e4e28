// Crop/flip geometry: torchvision's crop-window rules, exact copies, mirroring, center crop, normalisation.
#include <gtest/gtest.h>

#include <cmath>

#include "trainer/data/image_transforms.hpp"

namespace fanstore::trainer::data {
namespace {

// Every pixel distinct: R = x, G = y, B = (x + 2y) mod 256.
RgbImage coordinate_image(int height, int width) {
  RgbImage image;
  image.height = height;
  image.width = width;
  image.pixels.resize(static_cast<std::size_t>(height) * width * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      std::uint8_t* pixel = &image.pixels[(static_cast<std::size_t>(y) * width + x) * 3];
      pixel[0] = static_cast<std::uint8_t>(x);
      pixel[1] = static_cast<std::uint8_t>(y);
      pixel[2] = static_cast<std::uint8_t>((x + 2 * y) % 256);
    }
  }
  return image;
}

// Identity normalisation (mean 0, std 1/255) so outputs are raw 0..255 pixel values.
Normalization raw_values() {
  Normalization identity;
  identity.mean = {0, 0, 0};
  identity.stddev = {1.0f / 255, 1.0f / 255, 1.0f / 255};
  return identity;
}

TEST(RandomResizedCrop, WindowsRespectScaleRatioAndBounds) {
  RandomStream rng(123);
  const RandomResizedCropParams params;
  for (int trial = 0; trial < 2000; ++trial) {
    const int height = 20 + trial % 70, width = 30 + (trial * 7) % 90;
    const SourceWindow window = random_resized_crop_window(height, width, params, rng);
    ASSERT_GE(window.top, 0);
    ASSERT_GE(window.left, 0);
    ASSERT_LE(window.top + window.height, height);
    ASSERT_LE(window.left + window.width, width);
    ASSERT_EQ(window.top, std::floor(window.top));  // integer corners, as torchvision
    ASSERT_GT(window.height, 0);
    ASSERT_GT(window.width, 0);
    const double area_fraction = window.height * window.width / (double(height) * width);
    // Rounding the sides to whole pixels moves area and ratio a little off the sampled values.
    EXPECT_LE(area_fraction, 1.0 + 1e-9);
    EXPECT_GE(area_fraction, 0.08 * 0.7);
    const double ratio = window.width / window.height;
    EXPECT_GE(ratio, 0.75 * 0.75);
    EXPECT_LE(ratio, 4.0 / 3.0 / 0.75);
  }
}

TEST(RandomResizedCrop, SameSeedSameWindow) {
  RandomStream a(99), b(99);
  for (int i = 0; i < 100; ++i) {
    const SourceWindow wa = random_resized_crop_window(64, 80, {}, a);
    const SourceWindow wb = random_resized_crop_window(64, 80, {}, b);
    EXPECT_EQ(wa.top, wb.top);
    EXPECT_EQ(wa.left, wb.left);
    EXPECT_EQ(wa.height, wb.height);
    EXPECT_EQ(wa.width, wb.width);
  }
}

TEST(RandomResizedCrop, ImpossibleRatioFallsBackToClampedCenterCrop) {
  RandomStream rng(5);
  RandomResizedCropParams only_wide;
  only_wide.min_scale = only_wide.max_scale = 1.0;  // whole area at ratio >= 3/4 never fits 10x100
  const SourceWindow window = random_resized_crop_window(10, 100, only_wide, rng);
  EXPECT_EQ(window.height, 10);
  EXPECT_EQ(window.width, std::lround(10 * 4.0 / 3.0));
  EXPECT_EQ(window.left, 43);  // int((100 - 13) / 2), as torchvision
}

TEST(RenderWindow, IntegerWindowOfOutputSizeIsAnExactCopy) {
  const RgbImage image = coordinate_image(40, 50);
  const int size = 16;
  std::vector<float> out(3 * size * size);
  render_window_chw(image, SourceWindow{5, 7, size, size}, size, false, raw_values(), out.data());
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < size; ++y) {
      for (int x = 0; x < size; ++x) {
        ASSERT_NEAR(out[(c * size + y) * size + x], image.at(5 + y, 7 + x, c), 1e-3) << c << " " << y << " " << x;
      }
    }
  }
}

TEST(RenderWindow, FlipMirrorsColumns) {
  const RgbImage image = coordinate_image(30, 30);
  const int size = 12;
  std::vector<float> plain(3 * size * size), flipped(3 * size * size);
  const SourceWindow window{3, 4, size, size};
  render_window_chw(image, window, size, false, raw_values(), plain.data());
  render_window_chw(image, window, size, true, raw_values(), flipped.data());
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < size; ++y) {
      for (int x = 0; x < size; ++x) {
        EXPECT_EQ(flipped[(c * size + y) * size + x], plain[(c * size + y) * size + (size - 1 - x)]);
      }
    }
  }
  EXPECT_NEAR(flipped[0], 4 + size - 1, 1e-3);  // red = source x of the right edge
}

TEST(RenderWindow, DownscaleByTwoAveragesPixelPairs) {
  const RgbImage image = coordinate_image(8, 8);
  std::vector<float> out(3 * 4 * 4);
  render_window_chw(image, SourceWindow{0, 0, 8, 8}, 4, false, raw_values(), out.data());
  // Output x samples source x = 2x + 0.5: halfway between columns 2x and 2x + 1.
  for (int x = 0; x < 4; ++x) EXPECT_NEAR(out[x], 2 * x + 0.5, 1e-4);
  for (int y = 0; y < 4; ++y) EXPECT_NEAR(out[16 + y * 4], 2 * y + 0.5, 1e-4);
}

TEST(RenderWindow, NormalisesWithImagenetMeanAndStd) {
  RgbImage grey;
  grey.height = grey.width = 2;
  grey.pixels.assign(12, 128);
  std::vector<float> out(3 * 2 * 2);
  const Normalization imagenet;
  render_window_chw(grey, SourceWindow{0, 0, 2, 2}, 2, false, imagenet, out.data());
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(out[c * 4], (128 / 255.0 - imagenet.mean[c]) / imagenet.stddev[c], 1e-5);
  }
}

TEST(CenterCrop, MatchesResizeThenCenterCropGeometry) {
  // 300x400 (HxW): shorter side 300 -> 256, width 400 -> int(341.3) = 341; crop 224 at (16, round(58.5) = 58)
  // in resized pixels (Python rounds half to even).
  const SourceWindow window = resize_center_crop_window(300, 400, 256, 224);
  const double scale = 300.0 / 256.0;
  EXPECT_NEAR(window.top, 16 * scale, 1e-9);
  EXPECT_NEAR(window.height, 224 * scale, 1e-9);
  EXPECT_NEAR(window.left, 58 * (400.0 / 341), 1e-9);
  EXPECT_NEAR(window.width, 224 * (400.0 / 341), 1e-9);
  // A square image resized to its own size is a plain center crop.
  const SourceWindow plain = resize_center_crop_window(64, 64, 64, 56);
  EXPECT_EQ(plain.top, 4);
  EXPECT_EQ(plain.left, 4);
  EXPECT_EQ(plain.height, 56);
}

}  // namespace
}  // namespace fanstore::trainer::data
