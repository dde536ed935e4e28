// Codec round trips and checksums: raw, zstd, empty, incompressible, multi-chunk files, chunk size limits.
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

Chunk OneChunk(const Entry& e) {
  Chunk c;
  c.raw_size = static_cast<uint32_t>(e.size);
  c.stored_size = static_cast<uint32_t>(e.stored_size);
  c.codec = e.codec;
  c.checksum = e.checksum;
  return c;
}

Status Decode(const Entry& e, const std::string& stored, std::string* out) {
  out->assign(e.size, '\0');
  return DecodeChunk(e, OneChunk(e), stored.data(), stored.size(), out->data());
}

std::string Zstd(const std::string& data) {
  std::string z(ZSTD_compressBound(data.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), data.data(), data.size(), 3));
  return z;
}

TEST(DecodeChunkTest, RawRoundTrip) {
  std::string data = test::RandomBytes(1000, 7), out;
  ASSERT_TRUE(Decode(FileEntry(data, Codec::kRaw, data.size()), data, &out).ok());
  EXPECT_EQ(out, data);
}

TEST(DecodeChunkTest, ZstdRoundTrip) {
  std::string data = test::TextBytes(100000, 8), out, z = Zstd(data);
  ASSERT_TRUE(Decode(FileEntry(data, Codec::kZstd, z.size()), z, &out).ok());
  EXPECT_EQ(out, data);
}

TEST(DecodeChunkTest, ChecksumMismatchIsCorruptAndNamesTheFile) {
  std::string data = test::RandomBytes(100, 9), out;
  Entry e = FileEntry(data, Codec::kRaw, data.size());
  data[50] ^= 1;
  Status s = Decode(e, data, &out);
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find("x/y.bin"), std::string::npos) << s.ToString();
}

TEST(DecodeChunkTest, BadZstdAndWrongSizesAreCorrupt) {
  std::string data = test::TextBytes(5000, 10), out, z = Zstd(data);
  Entry e = FileEntry(data, Codec::kZstd, z.size());
  EXPECT_EQ(Decode(e, z.substr(0, z.size() / 2), &out).code(), Code::kCorrupt);  // truncated frame
  EXPECT_EQ(Decode(e, test::RandomBytes(z.size(), 11), &out).code(), Code::kCorrupt);
  Entry raw = FileEntry(data, Codec::kRaw, data.size());
  EXPECT_EQ(Decode(raw, data.substr(0, data.size() - 1), &out).code(), Code::kCorrupt);
  Entry bad_codec = FileEntry(data, static_cast<Codec>(7), data.size());
  EXPECT_EQ(Decode(bad_codec, data, &out).code(), Code::kCorrupt);
  // A frame that decodes to more than the chunk holds stops at the chunk's size: corrupt, nothing overrun.
  std::string longer = test::TextBytes(6000, 10), zl = Zstd(longer);
  Entry small = FileEntry(data, Codec::kZstd, zl.size());
  EXPECT_EQ(Decode(small, zl, &out).code(), Code::kCorrupt);
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
  for (auto [rel, want] :
       {std::pair{"text.txt", text}, {"noise.jpg", noise}, {"empty", std::string()}, {"one", std::string("1")}})
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

// A file of several chunks: each chunk compressed on its own (zstd where it pays, raw where it does not),
// a chunk table in the index, and every read path returns the same bytes.
TEST(PackCodecTest, MultiChunkFileMixesCodecsAndRoundTrips) {
  TempDir tmp;
  const uint32_t chunk = 64 * 1024;
  std::string big = test::TextBytes(5 * chunk + 12345, 5);
  big.replace(2 * chunk, chunk, test::RandomBytes(chunk, 6));  // chunk 2 is incompressible
  test::WriteFile(tmp / "src/big.txt", big);
  test::WriteFile(tmp / "src/small.txt", "small");
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img", 1, {}, 2, nullptr, chunk).ok());
  auto img = test::OpenOrDie(tmp / "img");
  ASSERT_TRUE(img);
  EXPECT_EQ(img->ChunkSize(), chunk);
  uint32_t id = *img->Lookup("big.txt");
  Entry e = img->Get(id);
  EXPECT_EQ(e.codec, Codec::kChunked);
  EXPECT_EQ(e.checksum, XXH3_64bits(big.data(), big.size()));
  ASSERT_EQ(img->ChunkCount(e), 6u);
  EXPECT_EQ(img->ChunkTableSize(), 6u);
  uint64_t stored = 0;
  for (uint64_t i = 0; i < 6; ++i) {
    auto c = img->GetChunk(e, i);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->raw_offset, i * chunk);
    EXPECT_EQ(c->raw_size, i < 5 ? chunk : 12345u);
    EXPECT_EQ(c->codec, i == 2 ? Codec::kRaw : Codec::kZstd) << i;
    EXPECT_EQ(c->offset, e.offset + stored);
    EXPECT_EQ(c->checksum, XXH3_64bits(big.data() + c->raw_offset, c->raw_size));
    stored += c->stored_size;
  }
  EXPECT_EQ(stored, e.stored_size);
  EXPECT_TRUE(img->CheckFile(id).ok());
  EXPECT_EQ(test::ReadImageFile(*img, "big.txt"), big);
  EXPECT_EQ(test::ReadImageFile(*img, "small.txt"), "small");
  EXPECT_EQ(img->Get(*img->Lookup("small.txt")).codec, Codec::kRaw);  // 5 bytes never shrink
}

TEST(PackCodecTest, ChunkSizeOutsideTheLimitsIsRefused) {
  TempDir tmp;
  test::WriteFile(tmp / "src/a", "a");
  for (uint32_t bad : {0u, 1000u, 32768u, 100000u, 128u << 20}) {
    auto r = test::PackTree(tmp / "src", tmp / "img", 1, {}, 2, nullptr, bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--chunk"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace fanstore
