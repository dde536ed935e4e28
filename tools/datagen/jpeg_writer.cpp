// JPEG encoding via the TurboJPEG API, written with one fwrite.
#include "jpeg_writer.hpp"

#include <turbojpeg.h>

#include <cstdio>
#include <memory>
#include <stdexcept>

namespace fanstore::datagen {

void write_jpeg(const std::string& path, const std::vector<std::uint8_t>& rgb, int height, int width, int quality) {
  // One compressor per thread: tjInitCompress allocates and generators run many images per thread.
  thread_local std::unique_ptr<void, int (*)(tjhandle)> compressor(tjInitCompress(), tjDestroy);
  if (!compressor) throw std::runtime_error(path + ": cannot initialise libjpeg-turbo compressor");
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  if (tjCompress2(compressor.get(), rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &jpeg_size, TJSAMP_420, quality,
                  TJFLAG_ACCURATEDCT) != 0) {
    const std::string reason = tjGetErrorStr2(compressor.get());
    tjFree(jpeg);
    throw std::runtime_error(path + ": JPEG encoding failed: " + reason);
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  const bool written = file != nullptr && std::fwrite(jpeg, 1, jpeg_size, file) == jpeg_size;
  const bool closed = file != nullptr && std::fclose(file) == 0;
  tjFree(jpeg);
  if (!written || !closed) throw std::runtime_error(path + ": cannot write JPEG file");
}

}  // namespace fanstore::datagen
