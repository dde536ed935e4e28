// Codec round trips and checksums: raw, zstd, empty, incompressible, streamed (> 64 MiB) files.
#include <gtest/gtest.h>
#include <xxhash.h>
#include <zstd.h>

#include "test_util.hpp"

namespace fanstore {
namespace {

using test::TempDir;

Entry FileEntry(const std::string& content, Codec codec, uint64_t stored_size) {
  Entry e;
  e.path = "x/y.bin";
  e.mode = S_IFREG | 0644;
  e.size = content.size();
  e.codec = codec;
  e.stored_size = stored_size;
  e.checksum = XXH3_64bits(content.data(), content.size());
  e.part = 0;
  return e;
}

TEST(DecodeStoredTest, RawRoundTrip) {
  std::string data = test::RandomBytes(1000, 7);
  Entry e = FileEntry(data, Codec::kRaw, data.size());
  std::string out(data.size(), '\0');
  ASSERT_TRUE(DecodeStored(e, data.data(), data.size(), out.data()).ok());
  EXPECT_EQ(out, data);
}

TEST(DecodeStoredTest, ZstdRoundTrip) {
  std::string data = test::TextBytes(100000, 8);
  std::string z(ZSTD_compressBound(data.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), data.data(), data.size(), 3));
  Entry e = FileEntry(data, Codec::kZstd, z.size());
  std::string out(data.size(), '\0');
  ASSERT_TRUE(DecodeStored(e, z.data(), z.size(), out.data()).ok());
  EXPECT_EQ(out, data);
}

TEST(DecodeStoredTest, EmptyFile) {
  Entry e = FileEntry("", Codec::kRaw, 0);
  char dummy = 0;
  EXPECT_TRUE(DecodeStored(e, &dummy, 0, &dummy).ok());
}

TEST(DecodeStoredTest, ChecksumMismatchIsCorruptAndNamesTheFile) {
  std::string data = test::RandomBytes(100, 9);
  Entry e = FileEntry(data, Codec::kRaw, data.size());
  data[50] ^= 1;
  std::string out(data.size(), '\0');
  Status s = DecodeStored(e, data.data(), data.size(), out.data());
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find("x/y.bin"), std::string::npos) << s.ToString();
}

TEST(DecodeStoredTest, BadZstdAndWrongSizesAreCorrupt) {
  std::string data = test::TextBytes(5000, 10);
  std::string z(ZSTD_compressBound(data.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), data.data(), data.size(), 3));
  std::string out(data.size(), '\0');
  Entry e = FileEntry(data, Codec::kZstd, z.size());
  EXPECT_EQ(DecodeStored(e, z.data(), z.size() / 2, out.data()).code(), Code::kCorrupt);  // truncated frame
  std::string junk = test::RandomBytes(z.size(), 11);
  EXPECT_EQ(DecodeStored(e, junk.data(), junk.size(), out.data()).code(), Code::kCorrupt);
  Entry raw = FileEntry(data, Codec::kRaw, data.size());
  EXPECT_EQ(DecodeStored(raw, data.data(), data.size() - 1, out.data()).code(), Code::kCorrupt);
  Entry bad_codec = FileEntry(data, static_cast<Codec>(7), data.size());
  EXPECT_EQ(DecodeStored(bad_codec, data.data(), data.size(), out.data()).code(), Code::kCorrupt);
}

TEST(PackCodecTest, StoredFormsAndChecksums) {
  TempDir tmp;
  const std::string text = test::TextBytes(300000, 1), noise = test::RandomBytes(300000, 2);
  test::WriteFile(tmp / "src/text.txt", text);
  test::WriteFile(tmp / "src/noise.jpg", noise);
  test::WriteFile(tmp / "src/empty", "");
  test::WriteFile(tmp / "src/one", "1");
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img").ok());
  auto img = test::OpenOrDie(tmp / "img");
  ASSERT_TRUE(img);
  Entry t = img->Get(*img->Lookup("text.txt"));
  EXPECT_EQ(t.codec, Codec::kZstd);
  EXPECT_LT(t.stored_size, t.size / 2);
  EXPECT_EQ(t.checksum, XXH3_64bits(text.data(), text.size()));
  Entry n = img->Get(*img->Lookup("noise.jpg"));
  EXPECT_EQ(n.codec, Codec::kRaw);  // incompressible: stored raw
  EXPECT_EQ(n.stored_size, n.size);
  Entry e = img->Get(*img->Lookup("empty"));
  EXPECT_EQ(e.size, 0u);
  EXPECT_EQ(e.stored_size, 0u);
  for (auto [rel, want] : {std::pair{"text.txt", text}, {"noise.jpg", noise}, {"empty", std::string()}, {"one", std::string("1")}})
    EXPECT_EQ(test::ReadImageFile(*img, rel), want) << rel;
  EXPECT_EQ(VerifyImage(*img, 2, {}), 0u);
}

TEST(PackCodecTest, LevelZeroStoresRaw) {
  TempDir tmp;
  test::WriteFile(tmp / "src/text.txt", test::TextBytes(100000, 1));
  PackOptions o;
  o.source = tmp / "src";
  o.output = tmp / "img";
  o.level = 0;
  ASSERT_TRUE(Pack(o).ok());
  auto img = test::OpenOrDie(tmp / "img");
  EXPECT_EQ(img->Get(*img->Lookup("text.txt")).codec, Codec::kRaw);
  EXPECT_EQ(test::ReadImageFile(*img, "text.txt"), test::TextBytes(100000, 1));
}

// Above the streaming threshold (64 MiB) pack streams one zstd frame and ReadFile/CheckFile stream it back.
TEST(PackCodecTest, StreamedLargeFileRoundTrips) {
  TempDir tmp;
  std::string big = test::TextBytes((64u << 20) + 12345, 5);
  big.replace(1000, 4096, test::RandomBytes(4096, 6));
  test::WriteFile(tmp / "src/big.txt", big);
  test::WriteFile(tmp / "src/small.txt", "small");
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img").ok());
  auto img = test::OpenOrDie(tmp / "img");
  ASSERT_TRUE(img);
  uint32_t id = *img->Lookup("big.txt");
  EXPECT_EQ(img->Get(id).codec, Codec::kZstd);
  EXPECT_TRUE(img->CheckFile(id).ok());
  EXPECT_EQ(test::ReadImageFile(*img, "big.txt"), big);
  EXPECT_EQ(test::ReadImageFile(*img, "small.txt"), "small");
}

}  // namespace
}  // namespace fanstore
