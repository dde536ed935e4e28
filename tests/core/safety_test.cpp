// Nothing the image says is trusted: crafted indexes with valid checksums (offsets past the partition, huge
// sizes, impossible chunk records) and partitions truncated or modified under a running reader give kCorrupt,
// never a crash, an unbounded allocation or a wrong byte; other files keep reading.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <string>

#include "fanstore/client.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "test_util.hpp"

namespace fanstore {
namespace {

using test::TempDir;
constexpr uint32_t kChunk = 64 * 1024;

// Rewrites index.fsi of `dir` through `edit`, then recomputes both checksums: a crafted, "valid" index.
template <class Edit>
void CraftIndex(const std::string& dir, Edit edit) {
  using namespace format;
  std::string b = test::ReadAll(dir + "/index.fsi");
  edit(b);
  Store64(b.data() + hdr::kBodyXxh3, XXH3_64bits(b.data() + kHeaderSize, b.size() - kHeaderSize));
  Store64(b.data() + hdr::kHeaderXxh3, XXH3_64bits(b.data(), hdr::kHeaderXxh3));
  test::Overwrite(dir + "/index.fsi", b);
}

// Byte offset of entry `id`'s record in index.fsi.
uint64_t EntryAt(const std::string& index, uint32_t id) {
  return format::Load64(index.data() + format::hdr::kEntriesOff) + uint64_t{id} * format::kEntrySize;
}

class SafetyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    big_ = test::TextBytes(6 * kChunk + 7, 1);
    raw_ = test::RandomBytes(3 * kChunk + 11, 2);
    test::WriteFile(tmp_ / "src/a/big.txt", big_);
    test::WriteFile(tmp_ / "src/a/raw.bin", raw_);
    test::WriteFile(tmp_ / "src/a/small.txt", test::TextBytes(5000, 3));
    test::WriteFile(tmp_ / "src/z/other.txt", test::TextBytes(7000, 4));
    ASSERT_TRUE(test::PackTree(tmp_ / "src", tmp_ / "img", 1, {}, 2, nullptr, kChunk).ok());
  }
  std::unique_ptr<Client> NewClient(uint64_t cache_bytes = 256 << 20) {
    ClientOptions o;
    o.image = tmp_ / "img";
    o.cache_bytes = cache_bytes;
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  uint32_t Id(const std::string& rel) { return *test::OpenOrDie(tmp_ / "img")->Lookup(rel); }
  Entry Get(const std::string& rel) { return test::OpenOrDie(tmp_ / "img")->Get(Id(rel)); }
  std::string Part() { return tmp_ / "img/part-00000.fsp"; }
  // Reads [off, off+n) of `rel` through a client; the status when it fails.
  static Result<std::string> ReadRange(Client& c, const std::string& rel, uint64_t off, size_t n) {
    auto id = c.Lookup(rel);
    if (!id.ok()) return id.status();
    auto f = c.Open(*id);
    if (!f.ok()) return f.status();
    std::string out(n, '\0');
    auto r = (*f)->ReadAt(off, out.data(), n);
    if (!r.ok()) return r.status();
    out.resize(*r);
    return out;
  }
  // Every other file still reads back exactly.
  void OthersIntact(Client& c) {
    auto r = ReadRange(c, "z/other.txt", 0, 1 << 20);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, test::TextBytes(7000, 4));
  }
  TempDir tmp_;
  std::string big_, raw_;
};

TEST_F(SafetyTest, EntryOffsetPastThePartitionIsCorrupt) {
  const uint32_t id = Id("a/small.txt");
  CraftIndex(tmp_ / "img",
             [&](std::string& b) { format::Store64(b.data() + EntryAt(b, id) + format::ent::kOffset, 1ull << 40); });
  auto c = NewClient();
  auto r = ReadRange(*c, "a/small.txt", 0, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_NE(r.status().message().find("a/small.txt"), std::string::npos) << r.status().message();
  OthersIntact(*c);
}

TEST_F(SafetyTest, HugeSizeOnACompressedFileAllocatesNothing) {
  // A one-chunk zstd file claiming 2^40 bytes: it would have 2^24 chunks but no chunk table rows.
  const uint32_t id = Id("a/small.txt");
  CraftIndex(tmp_ / "img",
             [&](std::string& b) { format::Store64(b.data() + EntryAt(b, id) + format::ent::kSize, 1ull << 40); });
  // Capped address space: an attempt to allocate the claimed size would fail the test with bad_alloc/ENOMEM.
  struct rlimit old;
  getrlimit(RLIMIT_AS, &old);
  struct rlimit cap = {4ull << 30, old.rlim_max};
  setrlimit(RLIMIT_AS, &cap);
  auto c = NewClient();
  auto r = ReadRange(*c, "a/small.txt", 123456789, 100);
  setrlimit(RLIMIT_AS, &old);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt) << r.status().ToString();
  struct stat st;
  c->FillStat(id, &st);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 1ull << 40);  // stat says what the index says; reads refuse
}

TEST_F(SafetyTest, AnEmptyFileWithStoredBytesIsCorruptAtOpenAsVerifySays) {
  // size 0 with the stored bytes of another file: `fanstore verify` rejects the layout, so open must too (it
  // used to read as an empty file). The reason is verify's, and the client prints it once on stderr.
  const uint32_t id = Id("a/small.txt");
  CraftIndex(tmp_ / "img", [&](std::string& b) { format::Store64(b.data() + EntryAt(b, id) + format::ent::kSize, 0); });
  Status verify = test::OpenOrDie(tmp_ / "img")->CheckFile(id);
  ASSERT_EQ(verify.code(), Code::kCorrupt);
  auto c = NewClient();
  testing::internal::CaptureStderr();
  auto f = c->Open(id);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kCorrupt);
  EXPECT_EQ(f.status().message(), verify.message());
  EXPECT_NE(f.status().message().find("stored bytes of an empty file"), std::string::npos) << f.status().message();
  EXPECT_NE(err.find("a/small.txt"), std::string::npos) << err;
  OthersIntact(*c);
}

TEST_F(SafetyTest, MultiChunkFileGrownPastItsChunkTableIsCorrupt) {
  const uint32_t id = Id("a/big.txt");
  CraftIndex(tmp_ / "img",
             [&](std::string& b) { format::Store64(b.data() + EntryAt(b, id) + format::ent::kSize, 1ull << 50); });
  auto c = NewClient();
  auto r = ReadRange(*c, "a/big.txt", 0, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  OthersIntact(*c);
}

TEST_F(SafetyTest, ChunkRecordsPointingOutsideTheirFileAreCorrupt) {
  const Entry e = Get("a/big.txt");
  using namespace format;
  for (int variant = 0; variant < 4; ++variant) {
    TempDir copy;
    for (const char* n : {"index.fsi", "part-00000.fsp"})
      test::WriteFile(copy / n, test::ReadAll(tmp_ / ("img/" + std::string(n))));
    CraftIndex(copy.path(), [&](std::string& b) {
      char* rec = b.data() + Load64(b.data() + hdr::kChunksOff) + (e.chunk_first + 2) * kChunkRecordSize;
      if (variant == 0) Store64(rec + chk::kStoredOff, e.stored_size);     // starts at the file's end
      if (variant == 1) Store32(rec + chk::kStoredSize, 0xFFFFFFF0u);      // larger than any chunk
      if (variant == 2) Store32(rec + chk::kCodec, 9);                     // unknown codec
      if (variant == 3) Store64(rec + chk::kStoredOff, ~uint64_t{0} - 5);  // overflowing offset
    });
    ClientOptions o;
    o.image = copy.path();
    auto c = Client::Create(o);
    ASSERT_TRUE(c.ok());
    auto ok = ReadRange(**c, "a/big.txt", 0, 100);  // chunk 0 is intact
    ASSERT_TRUE(ok.ok()) << ok.status().ToString();
    EXPECT_EQ(*ok, big_.substr(0, 100));
    auto bad = ReadRange(**c, "a/big.txt", 2 * kChunk + 5, 100);
    ASSERT_FALSE(bad.ok()) << "variant " << variant;
    EXPECT_EQ(bad.status().code(), Code::kCorrupt) << "variant " << variant;
    auto img = test::OpenOrDie(copy.path());
    EXPECT_FALSE(img->CheckFile(e.id).ok());
  }
}

TEST_F(SafetyTest, PartitionTruncatedAfterFirstUseIsCorruptNotSigbus) {
  auto c = NewClient();
  auto first = ReadRange(*c, "a/big.txt", 0, kChunk);  // chunk 0 decoded and cached
  ASSERT_TRUE(first.ok());
  const Entry e = Get("a/big.txt");
  ASSERT_EQ(::truncate(Part().c_str(), static_cast<off_t>(e.offset + e.stored_size / 2)), 0);
  auto late = ReadRange(*c, "a/big.txt", 5 * kChunk, 100);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), Code::kCorrupt);
  EXPECT_NE(late.status().message().find("truncated"), std::string::npos) << late.status().message();
  auto again = ReadRange(*c, "a/big.txt", 0, kChunk);  // verified before: still the true bytes
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, big_.substr(0, kChunk));
  // A kernel fd needs every chunk: it fails the same way instead of handing out a short or zeroed file.
  auto f = c->Open(Id("a/big.txt"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->KernelFd(0).status().code(), Code::kCorrupt);
}

TEST_F(SafetyTest, PartitionModifiedInPlaceAfterFirstReadNeverServesWrongBytes) {
  for (uint64_t cache : {uint64_t{0}, uint64_t{256} << 20}) {
    TempDir copy;
    for (const char* n : {"index.fsi", "part-00000.fsp"})
      test::WriteFile(copy / n, test::ReadAll(tmp_ / ("img/" + std::string(n))));
    ClientOptions o;
    o.image = copy.path();
    o.cache_bytes = cache;
    auto c = Client::Create(o);
    ASSERT_TRUE(c.ok());
    auto before = ReadRange(**c, "a/raw.bin", 0, raw_.size());
    ASSERT_TRUE(before.ok());
    ASSERT_EQ(*before, raw_);
    // rsync --inplace / bit rot on the raw file's second chunk, after it was read and verified once.
    const Entry e = test::OpenOrDie(copy.path())->Get(Id("a/raw.bin"));
    ASSERT_TRUE(test::FlipByte(copy / "part-00000.fsp", e.offset + kChunk + 100));
    for (int round = 0; round < 2; ++round) {
      auto after = ReadRange(**c, "a/raw.bin", kChunk, kChunk);
      if (after.ok()) {
        EXPECT_EQ(*after, raw_.substr(kChunk, kChunk)) << "cache " << cache;  // the verified copy
        EXPECT_NE(cache, 0u) << "with no cache the changed bytes must be refused";
      } else {
        EXPECT_EQ(after.status().code(), Code::kCorrupt);
      }
    }
    // A new process never had a verified copy: EIO.
    auto fresh = Client::Create(o);
    auto r = ReadRange(**fresh, "a/raw.bin", kChunk, 10);
    EXPECT_EQ(r.status().code(), Code::kCorrupt);
    OthersIntact(**fresh);
  }
}

}  // namespace
}  // namespace fanstore
