// JPEG decoding: pixels match PIL's decode within +-2, and corrupt files fail naming the file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "fanstore/env_tooling.hpp"
#include "test_support.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/jpeg_decoder.hpp"
#include "trainer/data/posix_file.hpp"

namespace fanstore::trainer::data {
namespace {

using testing::ScratchDir;

bool python_has_pil() {
  return testing::run_command(std::string(env::PythonInterpreter()) + " -c 'import PIL.Image' 2>/dev/null") == 0;
}

TEST(JpegDecoder, MatchesPillowWithinTwoLevels) {
  if (!python_has_pil()) {
    std::fprintf(stderr, "\n*** SKIPPED: %s with PIL is not available; JPEG decode NOT compared with PIL ***\n\n",
                 env::PythonInterpreter());
    GTEST_SKIP() << env::PythonInterpreter() << " with PIL is missing: JPEG decode not compared with PIL";
  }
  ScratchDir scratch;
  testing::run_datagen("imagefolder --samples 4 --classes 2 --size 48 --val-fraction 0 -o " + (scratch / "d"));
  // Also a greyscale, a 4:4:4 and a CMYK JPEG made by PIL itself, so it is not only our encoder's output.
  const std::string make_more = std::string(env::PythonInterpreter()) +
                                " -c \"from PIL import Image; "
                                "im = Image.open('" +
                                (scratch / "d/train/class_0001/img_0000001.jpg") +
                                "').convert('RGB').resize((37, 29)); "
                                "im.convert('L').save('" +
                                (scratch / "grey.jpg") +
                                "', quality=85); "
                                "im.save('" +
                                (scratch / "full.jpg") +
                                "', quality=95, subsampling=0); "
                                "im.convert('CMYK').save('" +
                                (scratch / "cmyk.jpg") + "', quality=90)\"";
  ASSERT_EQ(testing::run_command(make_more), 0);

  for (const std::string& path :
       {scratch / "d/train/class_0000/img_0000000.jpg", scratch / "d/train/class_0001/img_0000003.jpg",
        scratch / "grey.jpg", scratch / "full.jpg", scratch / "cmyk.jpg"}) {
    const std::string reference = scratch / "reference.rgb";
    const std::string decode =
        std::string(env::PythonInterpreter()) +
        " -c \"from PIL import Image; import sys; "
        "im = Image.open(sys.argv[1]).convert('RGB'); open(sys.argv[2], 'wb').write(im.tobytes()); "
        "print(im.size[0], im.size[1])\" " +
        path + " " + reference + " > " + (scratch / "size.txt");
    ASSERT_EQ(testing::run_command(decode), 0) << decode;
    int width = 0, height = 0;
    std::FILE* size_file = std::fopen((scratch / "size.txt").c_str(), "r");
    ASSERT_NE(size_file, nullptr);
    ASSERT_EQ(std::fscanf(size_file, "%d %d", &width, &height), 2);
    std::fclose(size_file);

    const RgbImage image = decode_jpeg(read_file_bytes(path), path);
    ASSERT_EQ(image.width, width) << path;
    ASSERT_EQ(image.height, height) << path;
    const auto expected = testing::read_bytes(reference);
    ASSERT_EQ(image.pixels.size(), expected.size()) << path;
    int worst = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, std::abs(image.pixels[i] - expected[i]));
    EXPECT_LE(worst, 2) << path;
    std::printf("  %s: %dx%d, max |ours - PIL| = %d\n", path.c_str(), width, height, worst);
  }
}

TEST(JpegDecoder, TruncatedJpegIsAnErrorNamingTheFile) {
  ScratchDir scratch;
  testing::run_datagen("imagefolder --samples 1 --classes 1 --val-fraction 0 -o " + (scratch / "d"));
  const std::string path = scratch / "d/train/class_0000/img_0000000.jpg";
  auto bytes = testing::read_bytes(path);
  bytes.resize(bytes.size() / 2);
  testing::write_bytes(path, bytes);
  try {
    decode_jpeg(read_file_bytes(path), path);
    FAIL() << "a truncated JPEG decoded without error";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << "not one line: " << error.what();
  }
}

TEST(JpegDecoder, ASoundImageDecodesAfterABadOneOnTheSameThread) {
  ScratchDir scratch;
  testing::run_datagen("imagefolder --samples 2 --classes 1 --size 40 --val-fraction 0 -o " + (scratch / "d"));
  const std::string bad = scratch / "d/train/class_0000/img_0000000.jpg";
  const std::string good = scratch / "d/train/class_0000/img_0000001.jpg";
  const RgbImage before = decode_jpeg(read_file_bytes(good), good);
  auto bytes = testing::read_bytes(bad);
  bytes.resize(300);  // a header and no scan: the decompressor fails inside libjpeg
  EXPECT_THROW(decode_jpeg(bytes, bad), DataError);
  // Before the decompressor was made anew after an error, this threw "zero-sized image".
  const RgbImage after = decode_jpeg(read_file_bytes(good), good);
  EXPECT_EQ(after.pixels, before.pixels);
}

TEST(JpegDecoder, GarbageIsAnErrorNamingTheFile) {
  ScratchDir scratch;
  const std::string path = scratch / "not-a.jpg";
  testing::write_bytes(path, std::vector<std::uint8_t>(1000, 0x42));
  EXPECT_THROW(
      {
        try {
          decode_jpeg(read_file_bytes(path), path);
        } catch (const DataError& error) {
          EXPECT_EQ(error.path(), path);
          throw;
        }
      },
      DataError);
  EXPECT_THROW(decode_jpeg({}, path), DataError);
}

TEST(PosixFile, MissingFileIsAnErrorNamingIt) {
  try {
    read_file_bytes("/nonexistent/fanstore/file.jpg");
    FAIL();
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/fanstore/file.jpg"), std::string::npos);
  }
}

}  // namespace
}  // namespace fanstore::trainer::data
