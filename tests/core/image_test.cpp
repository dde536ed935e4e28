// Image read side: lookups (nested, missing, ENOTDIR, many keys), sorted listings with d_type, stat fields.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <set>

#include "test_util.hpp"

namespace fanstore {
namespace {

using test::TempDir;

class ImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::WriteFile(tmp_ / "src/train/cat/001.jpg", test::RandomBytes(5000, 1));
    test::WriteFile(tmp_ / "src/train/cat/002.jpg", test::RandomBytes(3000, 2));
    test::WriteFile(tmp_ / "src/train/dog/001.jpg", test::TextBytes(20000, 3));
    test::WriteFile(tmp_ / "src/README", "hello\n");
    test::WriteFile(tmp_ / "src/a b", "space");
    test::WriteFile(tmp_ / "src/a/x", "x");  // "a b" < "a/x" bytewise, but listings are per directory
    test::MakeDirs(tmp_ / "src/empty");
    ::chmod((tmp_ / "src/README").c_str(), 0600);
    struct timespec ts[2] = {{1500000000, 123456789}, {1500000000, 987654321}};
    ::utimensat(AT_FDCWD, (tmp_ / "src/README").c_str(), ts, 0);
    ASSERT_TRUE(test::PackTree(tmp_ / "src", tmp_ / "img").ok());
    img_ = test::OpenOrDie(tmp_ / "img");
    ASSERT_TRUE(img_);
  }
  TempDir tmp_;
  std::shared_ptr<const Image> img_;
};

TEST_F(ImageTest, RootIsEntryZero) {
  auto r = img_->Lookup("");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, kRootId);
  Entry e = img_->Get(kRootId);
  EXPECT_TRUE(e.is_dir());
  EXPECT_EQ(e.path, "");
  EXPECT_EQ(e.name, "");
  EXPECT_EQ(e.parent, kRootId);
}

TEST_F(ImageTest, NestedLookupAndContent) {
  auto r = img_->Lookup("train/dog/001.jpg");
  ASSERT_TRUE(r.ok());
  Entry e = img_->Get(*r);
  EXPECT_EQ(e.path, "train/dog/001.jpg");
  EXPECT_EQ(e.name, "001.jpg");
  EXPECT_EQ(img_->Get(e.parent).path, "train/dog");
  EXPECT_EQ(e.codec, Codec::kZstd);  // text compresses
  EXPECT_EQ(test::ReadImageFile(*img_, "train/dog/001.jpg"), test::TextBytes(20000, 3));
  EXPECT_EQ(test::ReadImageFile(*img_, "train/cat/001.jpg"), test::RandomBytes(5000, 1));
  EXPECT_EQ(img_->Get(*img_->Lookup("train/cat/001.jpg")).codec, Codec::kRaw);  // random does not
}

TEST_F(ImageTest, MissingPaths) {
  for (const char* p : {"nope", "train/cat/003.jpg", "train/cat/001.jp", "train/ca", "TRAIN", "/train", "train/"}) {
    auto r = img_->Lookup(p);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.status().code(), Code::kNotFound) << p;
  }
}

TEST_F(ImageTest, FileAsDirectoryIsNotDirectory) {
  auto r = img_->Lookup("README/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotDirectory);
  r = img_->Lookup("train/cat/001.jpg/a/b");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotDirectory);
}

TEST_F(ImageTest, ListingsSortedWithDType) {
  std::vector<std::pair<std::string, unsigned char>> got;
  for (uint32_t i = 0; i < img_->ChildCount(kRootId); ++i) {
    Entry c = img_->Get(img_->Child(kRootId, i));
    got.emplace_back(std::string(c.name), c.d_type());
    EXPECT_EQ(c.parent, kRootId);
  }
  std::vector<std::pair<std::string, unsigned char>> want = {
      {"README", DT_REG}, {"a", DT_DIR}, {"a b", DT_REG}, {"empty", DT_DIR}, {"train", DT_DIR}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(img_->ChildCount(*img_->Lookup("empty")), 0u);
  EXPECT_EQ(img_->ChildCount(*img_->Lookup("README")), 0u);
  uint32_t cat = *img_->Lookup("train/cat");
  ASSERT_EQ(img_->ChildCount(cat), 2u);
  EXPECT_EQ(img_->Get(img_->Child(cat, 0)).name, "001.jpg");
  EXPECT_EQ(img_->Get(img_->Child(cat, 1)).name, "002.jpg");
}

TEST_F(ImageTest, StatFieldsMatchSource) {
  Entry e = img_->Get(*img_->Lookup("README"));
  EXPECT_EQ(e.mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(e.size, 6u);
  EXPECT_EQ(e.mtime_sec, 1500000000);
  EXPECT_EQ(e.mtime_nsec, 987654321u);
  EXPECT_EQ(e.nlink, 1u);
  struct stat st;
  ASSERT_EQ(::stat((tmp_ / "src/train").c_str(), &st), 0);
  Entry d = img_->Get(*img_->Lookup("train"));
  EXPECT_EQ(d.size, static_cast<uint64_t>(st.st_size));
  EXPECT_EQ(d.nlink, 4u);  // 2 + cat + dog
  EXPECT_EQ(d.nlink, static_cast<uint32_t>(st.st_nlink));
  EXPECT_EQ(d.mode, static_cast<uint32_t>(st.st_mode));
  EXPECT_EQ(d.mtime_nsec, static_cast<uint32_t>(st.st_mtim.tv_nsec));
  EXPECT_EQ(img_->Get(kRootId).nlink, 5u);  // 2 + a, empty, train
}

TEST_F(ImageTest, InodesStableUniqueNonZero) {
  std::set<uint64_t> seen;
  for (uint32_t id = 0; id < img_->size(); ++id) {
    uint64_t ino = img_->Get(id).ino;
    EXPECT_NE(ino, 0u);
    EXPECT_TRUE(seen.insert(ino).second);
  }
  auto again = test::OpenOrDie(tmp_ / "img");
  for (uint32_t id = 0; id < img_->size(); ++id) EXPECT_EQ(again->Get(id).ino, img_->Get(id).ino);
}

TEST_F(ImageTest, OutOfRangeAccessIsHarmless) {
  EXPECT_EQ(img_->ChildCount(1u << 30), 0u);
  EXPECT_EQ(img_->Get(1u << 30).path, "");
  std::string s;
  EXPECT_FALSE(img_->ReadStored(1u << 30, &s).ok());
  EXPECT_EQ(img_->ReadStored(kRootId, &s).code(), Code::kIsDirectory);
}

// What a remote daemon sends (stored bytes, whole or one chunk) decodes to what ReadFile reads.
TEST_F(ImageTest, ReadStoredPlusDecodeChunkEqualsReadFile) {
  uint32_t id = *img_->Lookup("train/dog/001.jpg");
  std::string stored;
  ASSERT_TRUE(img_->ReadStored(id, &stored).ok());
  Entry e = img_->Get(id);
  EXPECT_EQ(stored.size(), e.stored_size);
  std::string out(e.size, '\0');
  for (uint64_t i = 0; i < img_->ChunkCount(e); ++i) {
    auto c = img_->GetChunk(e, i);
    ASSERT_TRUE(c.ok());
    std::string piece;
    ASSERT_TRUE(img_->ReadStoredRange(id, c->offset - e.offset, c->stored_size, &piece).ok());
    EXPECT_EQ(piece, stored.substr(c->offset - e.offset, c->stored_size));
    ASSERT_TRUE(DecodeChunk(e, *c, piece.data(), piece.size(), out.data() + c->raw_offset).ok());
  }
  EXPECT_EQ(out, test::TextBytes(20000, 3));
  EXPECT_EQ(img_->ReadStoredRange(id, e.stored_size, 1, &stored).code(), Code::kInvalidArgument);
}

// Many keys in one table exercise bucket collisions and long probe runs; every path must resolve to itself.
TEST(ImageManyTest, ManyPathsAllResolve) {
  TempDir tmp;
  std::map<std::string, std::string> files;
  for (int i = 0; i < 1200; ++i) {
    std::string rel = "d" + std::to_string(i % 37) + "/sub" + std::to_string(i % 5) + "/f" + std::to_string(i);
    files[rel] = std::to_string(i * 7919);
    test::WriteFile(tmp / ("src/" + rel), files[rel]);
  }
  ASSERT_TRUE(test::PackTree(tmp / "src", tmp / "img", 3).ok());
  auto img = test::OpenOrDie(tmp / "img");
  ASSERT_TRUE(img);
  EXPECT_EQ(img->Summary().files, files.size());
  for (const auto& [rel, data] : files) {
    auto id = img->Lookup(rel);
    ASSERT_TRUE(id.ok()) << rel;
    EXPECT_EQ(img->Get(*id).path, rel);
  }
  for (int i = 0; i < 1200; ++i) EXPECT_FALSE(img->Lookup("d0/sub0/g" + std::to_string(i)).ok());
  EXPECT_EQ(test::ReadImageFile(*img, "d3/sub2/f77"), files["d3/sub2/f77"]);
}

}  // namespace
}  // namespace fanstore
