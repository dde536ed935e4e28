// JPEG decoding with the TurboJPEG API: header, then tjDecompress2 to RGB (CMYK converted as PIL converts it),
// warnings treated as errors.
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

// A decompressor per thread: tjInitDecompress allocates, and prefetch threads decode many images. After an error
// the handle is made anew: a truncated file left it so that the next, sound image read as "zero-sized".
thread_local TjHandle tls_decompressor;

tjhandle thread_decompressor() {
  if (!tls_decompressor) tls_decompressor.reset(tjInitDecompress());
  return tls_decompressor.get();
}

[[noreturn]] void fail(tjhandle decompressor, const std::string& path) {
  const std::string why = std::string("corrupt JPEG: ") + tjGetErrorStr2(decompressor);
  tls_decompressor.reset();
  throw DataError(path, why);
}

// Pillow's MULDIV255: a * b / 255, rounded as Pillow rounds it.
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

}  // namespace

RgbImage decode_jpeg(const std::vector<std::uint8_t>& bytes, const std::string& path) {
  if (bytes.empty()) throw DataError(path, "corrupt JPEG: file is empty");
  tjhandle decompressor = thread_decompressor();
  if (decompressor == nullptr) throw DataError(path, "cannot initialise libjpeg-turbo decompressor");

  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(decompressor, bytes.data(), static_cast<unsigned long>(bytes.size()), &width, &height,
                          &subsampling, &colorspace) != 0)
    fail(decompressor, path);
  if (width <= 0 || height <= 0) {
    tls_decompressor.reset();
    throw DataError(path, "corrupt JPEG: zero-sized image");
  }

  RgbImage image;
  image.width = width;
  image.height = height;
  const std::size_t pixels = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  image.pixels.resize(pixels * 3);
  // ACCURATEDCT = libjpeg's default islow IDCT, which is what PIL uses; fancy upsampling stays on.
  const int flags = TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING;
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;  // ImageNet has a few (Adobe, inverted)
  std::vector<std::uint8_t> ink(cmyk ? pixels * 4 : 0);
  if (tjDecompress2(decompressor, bytes.data(), static_cast<unsigned long>(bytes.size()),
                    cmyk ? ink.data() : image.pixels.data(), width, 0 /* pitch = width x pixel size */, height,
                    cmyk ? TJPF_CMYK : TJPF_RGB, flags) != 0)
    fail(decompressor, path);
  // PIL reads a JPEG's CMYK as Adobe's inverted values ("CMYK;I") and converts each channel to
  // (255 - k) - (255 - k) x c / 255 with c and k its own, uninverted, values.
  for (std::size_t p = 0; p < (cmyk ? pixels : 0); ++p) {
    const int k = ink[p * 4 + 3];  // 255 - PIL's k
    for (int c = 0; c < 3; ++c)
      image.pixels[p * 3 + static_cast<std::size_t>(c)] =
          static_cast<std::uint8_t>(k - muldiv255(255 - ink[p * 4 + static_cast<std::size_t>(c)], k));
  }
  return image;
}

}  // namespace fanstore::trainer::data
