// JPEG bytes -> 8-bit RGB pixels with libjpeg-turbo (tjDecompress2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fanstore::trainer::data {

// Interleaved RGB, row-major (HWC), 8 bits per channel.
struct RgbImage {
  int height = 0;
  int width = 0;
  std::vector<std::uint8_t> pixels;  // height * width * 3

  std::uint8_t at(int y, int x, int channel) const {
    return pixels[(static_cast<std::size_t>(y) * width + x) * 3 + channel];
  }
};

// Decodes a baseline/progressive JPEG (colour or greyscale) to RGB with the accurate integer DCT,
// the same as PIL. Any libjpeg warning (e.g. a truncated file) is an error: a half-grey image is
// worse than a skipped one. `path` is only used in the DataError message.
RgbImage decode_jpeg(const std::vector<std::uint8_t>& bytes, const std::string& path);

}  // namespace fanstore::trainer::data
