// JPEG decoding with the TurboJPEG API: header, then tjDecompress2 to RGB, warnings treated as errors.
#include "trainer/data/jpeg_decoder.hpp"

#include <turbojpeg.h>

#include <memory>

#include "trainer/data/data_error.hpp"

namespace fanstore::trainer::data {
namespace {

struct TjHandleCloser {
  void operator()(void* handle) const { tjDestroy(handle); }
};
using TjHandle = std::unique_ptr<void, TjHandleCloser>;

// A decompressor per thread: tjInitDecompress allocates, and prefetch threads decode many images.
tjhandle thread_decompressor() {
  thread_local TjHandle handle(tjInitDecompress());
  return handle.get();
}

}  // namespace

RgbImage decode_jpeg(const std::vector<std::uint8_t>& bytes, const std::string& path) {
  if (bytes.empty()) throw DataError(path, "corrupt JPEG: file is empty");
  tjhandle decompressor = thread_decompressor();
  if (decompressor == nullptr) throw DataError(path, "cannot initialise libjpeg-turbo decompressor");

  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(decompressor, bytes.data(), static_cast<unsigned long>(bytes.size()), &width, &height,
                          &subsampling, &colorspace) != 0) {
    throw DataError(path, std::string("corrupt JPEG: ") + tjGetErrorStr2(decompressor));
  }
  if (width <= 0 || height <= 0) throw DataError(path, "corrupt JPEG: zero-sized image");

  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(static_cast<std::size_t>(width) * height * 3);
  // ACCURATEDCT = libjpeg's default islow IDCT, which is what PIL uses; fancy upsampling stays on.
  const int flags = TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING;
  if (tjDecompress2(decompressor, bytes.data(), static_cast<unsigned long>(bytes.size()), image.pixels.data(), width,
                    0 /* pitch = width * 3 */, height, TJPF_RGB, flags) != 0) {
    throw DataError(path, std::string("corrupt JPEG: ") + tjGetErrorStr2(decompressor));
  }
  return image;
}

}  // namespace fanstore::trainer::data
