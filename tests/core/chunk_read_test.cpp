// Range reads over chunks, byte for byte: files of 0, 1, chunk-1, chunk, chunk+1 and several chunks, raw and
// zstd; the first and last byte of every chunk, reads spanning chunks, random ranges, threads, kernel fds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fanstore/client.hpp"
#include "test_util.hpp"

namespace fanstore {
namespace {

using test::TempDir;

constexpr uint32_t kChunk = 64 * 1024;

struct Case {
  std::string rel;
  std::string bytes;
};

// Sizes around every boundary, in a compressible and an incompressible flavour.
std::vector<Case> MakeCases() {
  std::vector<Case> cases;
  const uint64_t sizes[] = {0, 1, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 5, 2 * kChunk};
  int seed = 1;
  for (uint64_t n : sizes) {
    cases.push_back({"text/" + std::to_string(n), test::TextBytes(n, seed++)});
    cases.push_back({"rand/" + std::to_string(n), test::RandomBytes(n, seed++)});
  }
  // Mixed: compressible chunks around an incompressible one.
  std::string mixed = test::TextBytes(4 * kChunk + 100, 99);
  mixed.replace(kChunk + 10, kChunk, test::RandomBytes(kChunk, 98));
  cases.push_back({"mixed", mixed});
  return cases;
}

class ChunkReadTest : public ::testing::TestWithParam<int> {  // param: zstd level (0 = raw)
 protected:
  void SetUp() override {
    cases_ = MakeCases();
    for (const Case& c : cases_) test::WriteFile(tmp_ / ("src/" + c.rel), c.bytes);
    ASSERT_TRUE(test::PackTree(tmp_ / "src", tmp_ / "img", 2, {}, 2, nullptr, kChunk, GetParam()).ok());
    ClientOptions o;
    o.image = tmp_ / "img";
    o.cache_bytes = 1 << 20;  // small: evictions happen
    auto c = Client::Create(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  std::shared_ptr<OpenFile> Open(const std::string& rel) {
    auto id = client_->Lookup(rel);
    EXPECT_TRUE(id.ok()) << rel;
    auto f = client_->Open(*id);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return *f;
  }
  static std::string Read(OpenFile& f, uint64_t off, size_t n) {
    std::string out(n, '\0');
    auto r = f.ReadAt(off, out.data(), n);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    out.resize(r.ok() ? *r : 0);
    return out;
  }
  TempDir tmp_;
  std::vector<Case> cases_;
  std::unique_ptr<Client> client_;
};

TEST_P(ChunkReadTest, WholeFilesAndEveryChunkEdge) {
  for (const Case& c : cases_) {
    auto f = Open(c.rel);
    const uint64_t n = c.bytes.size();
    ASSERT_EQ(f->size(), n);
    EXPECT_EQ(Read(*f, 0, n + 100), c.bytes) << c.rel;
    for (uint64_t start = 0; start < n; start += kChunk) {
      const uint64_t last = std::min<uint64_t>(start + kChunk, n) - 1;
      EXPECT_EQ(Read(*f, start, 1), c.bytes.substr(start, 1)) << c.rel << " first byte of chunk at " << start;
      EXPECT_EQ(Read(*f, last, 1), c.bytes.substr(last, 1)) << c.rel << " last byte of chunk at " << start;
      if (start > 0) {  // across the boundary into this chunk
        EXPECT_EQ(Read(*f, start - 3, 7), c.bytes.substr(start - 3, 7)) << c.rel << " spanning " << start;
      }
    }
    EXPECT_EQ(Read(*f, n, 10), "") << c.rel;
    EXPECT_EQ(Read(*f, n + kChunk * 5, 10), "") << c.rel;
  }
}

TEST_P(ChunkReadTest, RandomRangesAndVisitAgree) {
  std::mt19937_64 rng(7);
  for (const Case& c : cases_) {
    auto f = Open(c.rel);
    const uint64_t n = c.bytes.size();
    for (int k = 0; k < 60; ++k) {
      const uint64_t off = n ? rng() % (n + 10) : 0;
      const size_t len = static_cast<size_t>(rng() % (3 * kChunk));
      const std::string want = off < n ? c.bytes.substr(off, len) : "";
      EXPECT_EQ(Read(*f, off, len), want) << c.rel << " @" << off << "+" << len;
      std::string got;
      auto r = f->Visit(off, len, [&](const char* p, size_t m) {
        got.append(p, m);
        return m;
      });
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(*r, want.size());
      EXPECT_EQ(got, want) << c.rel << " visit @" << off << "+" << len;
    }
  }
}

TEST_P(ChunkReadTest, SequentialSmallReadsWithReadAhead) {
  for (const char* rel : {"mixed", "text/196613", "rand/196613"}) {
    const Case* c = nullptr;
    for (const Case& x : cases_)
      if (x.rel == rel) c = &x;
    ASSERT_NE(c, nullptr);
    auto f = Open(rel);
    std::string all;
    for (uint64_t off = 0;; off += 4096) {
      std::string piece = Read(*f, off, 4096);
      if (piece.empty()) break;
      all += piece;
    }
    EXPECT_EQ(all, c->bytes) << rel;
  }
}

TEST_P(ChunkReadTest, ManyThreadsOnOneOpenFile) {
  const Case& c = cases_.back();  // "mixed"
  auto f = Open(c.rel);
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 6; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int k = 0; k < 200; ++k) {
        const uint64_t off = rng() % c.bytes.size();
        const size_t len = rng() % (2 * kChunk);
        std::string out(len, '\0');
        auto r = f->ReadAt(off, out.data(), len);
        if (!r.ok() || out.substr(0, *r) != c.bytes.substr(off, len)) ++bad;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(ChunkReadTest, KernelFdsHoldEveryByte) {
  for (const Case& c : cases_) {
    auto f = Open(c.rel);
    auto fd = f->KernelFd(O_CLOEXEC);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    struct stat st;
    ASSERT_EQ(fstat(*fd, &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), c.bytes.size());
    EXPECT_EQ(fcntl(*fd, F_GETFL) & O_ACCMODE, O_RDONLY);
    if (!c.bytes.empty()) {
      void* p = mmap(nullptr, c.bytes.size(), PROT_READ, MAP_SHARED, *fd, 0);
      ASSERT_NE(p, MAP_FAILED);
      EXPECT_EQ(std::string(static_cast<const char*>(p), c.bytes.size()), c.bytes) << c.rel;
      munmap(p, c.bytes.size());
    }
    close(*fd);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, ChunkReadTest, ::testing::Values(0, 3),
                         [](const ::testing::TestParamInfo<int>& i) { return i.param ? "zstd" : "raw"; });

}  // namespace
}  // namespace fanstore
