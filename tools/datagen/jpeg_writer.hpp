// Encodes an RGB image to a JPEG file with libjpeg-turbo (tjCompress2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fanstore::datagen {

// `rgb` is interleaved HWC, 8 bits. 4:2:0 chroma subsampling, like most ImageNet JPEGs.
// Throws std::runtime_error naming the path on failure.
void write_jpeg(const std::string& path, const std::vector<std::uint8_t>& rgb, int height, int width, int quality);

}  // namespace fanstore::datagen
