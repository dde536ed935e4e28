// Crop-window sampling (torchvision's RandomResizedCrop rules), validation windows and bilinear rendering.
#include "trainer/data/image_transforms.hpp"

#include <algorithm>
#include <cmath>

namespace fanstore::trainer::data {

SourceWindow random_resized_crop_window(int image_height, int image_width, const RandomResizedCropParams& params,
                                        RandomStream& rng) {
  const double area = static_cast<double>(image_height) * image_width;
  const double log_min_ratio = std::log(params.min_ratio);
  const double log_max_ratio = std::log(params.max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(params.min_scale, params.max_scale);
    const double aspect = std::exp(rng.uniform(log_min_ratio, log_max_ratio));
    const int width = static_cast<int>(std::lround(std::sqrt(target_area * aspect)));
    const int height = static_cast<int>(std::lround(std::sqrt(target_area / aspect)));
    if (width > 0 && width <= image_width && height > 0 && height <= image_height) {
      const auto top = static_cast<int>(rng.below(static_cast<std::uint64_t>(image_height - height + 1)));
      const auto left = static_cast<int>(rng.below(static_cast<std::uint64_t>(image_width - width + 1)));
      return SourceWindow{double(top), double(left), double(height), double(width)};
    }
  }
  // Fallback, as torchvision: the whole image cut to the nearest allowed aspect ratio, centred.
  const double in_ratio = static_cast<double>(image_width) / image_height;
  int width = image_width, height = image_height;
  if (in_ratio < params.min_ratio) {
    height = static_cast<int>(std::lround(width / params.min_ratio));
  } else if (in_ratio > params.max_ratio) {
    width = static_cast<int>(std::lround(height * params.max_ratio));
  }
  return SourceWindow{double((image_height - height) / 2), double((image_width - width) / 2), double(height),
                      double(width)};
}

SourceWindow resize_center_crop_window(int image_height, int image_width, int resize_size, int crop_size) {
  // torchvision Resize(int): the shorter side becomes resize_size, the longer one is truncated
  // (int(size * long / short)), as torchvision does.
  const bool height_is_shorter = image_height <= image_width;
  const int resized_height =
      height_is_shorter ? resize_size : static_cast<int>(double(resize_size) * image_height / image_width);
  const int resized_width =
      height_is_shorter ? static_cast<int>(double(resize_size) * image_width / image_height) : resize_size;
  // CenterCrop: int(round((size - crop) / 2)) with Python's round-half-to-even (nearbyint).
  const double crop_top = std::nearbyint((resized_height - crop_size) / 2.0);
  const double crop_left = std::nearbyint((resized_width - crop_size) / 2.0);
  const double scale_y = double(image_height) / resized_height;  // source pixels per resized pixel
  const double scale_x = double(image_width) / resized_width;
  return SourceWindow{crop_top * scale_y, crop_left * scale_x, crop_size * scale_y, crop_size * scale_x};
}

void render_window_chw(const RgbImage& image, const SourceWindow& window, int output_size, bool flip_horizontal,
                       const Normalization& normalization, float* out) {
  const std::size_t plane = static_cast<std::size_t>(output_size) * output_size;
  const double step_y = window.height / output_size;
  const double step_x = window.width / output_size;
  float scale[3], shift[3];  // out = v * scale + shift == (v / 255 - mean) / std
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * normalization.stddev[c]);
    shift[c] = -normalization.mean[c] / normalization.stddev[c];
  }
  for (int y = 0; y < output_size; ++y) {
    // Half-pixel centres (align_corners=False): an integer window of the output size copies exactly.
    const double source_y = std::clamp(window.top + (y + 0.5) * step_y - 0.5, 0.0, double(image.height - 1));
    const int y0 = static_cast<int>(source_y);
    const int y1 = std::min(y0 + 1, image.height - 1);
    const float wy = static_cast<float>(source_y - y0);
    for (int x = 0; x < output_size; ++x) {
      const double source_x = std::clamp(window.left + (x + 0.5) * step_x - 0.5, 0.0, double(image.width - 1));
      const int x0 = static_cast<int>(source_x);
      const int x1 = std::min(x0 + 1, image.width - 1);
      const float wx = static_cast<float>(source_x - x0);
      const int out_x = flip_horizontal ? output_size - 1 - x : x;
      for (int c = 0; c < 3; ++c) {
        const float top = image.at(y0, x0, c) * (1 - wx) + image.at(y0, x1, c) * wx;
        const float bottom = image.at(y1, x0, c) * (1 - wx) + image.at(y1, x1, c) * wx;
        const float value = top * (1 - wy) + bottom * wy;
        out[c * plane + static_cast<std::size_t>(y) * output_size + out_x] = value * scale[c] + shift[c];
      }
    }
  }
}

}  // namespace fanstore::trainer::data
