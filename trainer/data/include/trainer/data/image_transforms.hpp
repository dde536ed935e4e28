// ImageNet-style geometry and normalisation: random-resized-crop, flip, resize + center crop, mean/std.
#pragma once

#include <array>

#include "trainer/data/jpeg_decoder.hpp"
#include "trainer/data/random_stream.hpp"

namespace fanstore::trainer::data {

// A window in source-image pixel units; may be fractional (a resize + center crop maps to one).
struct SourceWindow {
  double top = 0;
  double left = 0;
  double height = 0;
  double width = 0;
};

struct RandomResizedCropParams {
  double min_scale = 0.08;  // fraction of the image area
  double max_scale = 1.0;
  double min_ratio = 3.0 / 4.0;  // width / height
  double max_ratio = 4.0 / 3.0;
};

// torchvision.transforms.RandomResizedCrop.get_params: 10 tries at a random area and log-uniform
// aspect ratio; if none fits, the largest center crop with the ratio clamped to [min, max].
// The window has integer corners inside the image.
SourceWindow random_resized_crop_window(int image_height, int image_width, const RandomResizedCropParams& params,
                                        RandomStream& rng);

// Validation geometry: resize so the shorter side is `resize_size`, then center-crop
// `crop_size` x `crop_size`; returned as the window of the original image it covers.
SourceWindow resize_center_crop_window(int image_height, int image_width, int resize_size, int crop_size);

struct Normalization {
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};  // ImageNet, on the 0..1 scale
  std::array<float, 3> stddev{0.229f, 0.224f, 0.225f};
};

// Samples `window` bilinearly (pixel centres, edges clamped; no antialiasing) into an
// output_size x output_size image, mirrors it left-right if `flip_horizontal`, normalises
// ((v/255 - mean) / std) and writes planar CHW floats to `out` (3 * output_size^2 values).
void render_window_chw(const RgbImage& image, const SourceWindow& window, int output_size, bool flip_horizontal,
                       const Normalization& normalization, float* out);

}  // namespace fanstore::trainer::data
