// The > 4 GiB case: a sparse 4.5 GiB file packs into 4608 chunks, reads back at offsets past 4 GiB through
// range reads, and verifies. Label `slow`.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "fanstore/client.hpp"
#include "test_util.hpp"

namespace fanstore {
namespace {

TEST(BigFileTest, SparseFileOver4GiB) {
  test::TempDir tmp;
  test::MakeDirs(tmp / "src");
  const uint64_t size = 4608ull << 20;  // 4.5 GiB: offsets and sizes need 64 bits
  int fd = ::open((tmp / "src/huge.bin").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  // A marker just past 4 GiB catches any 32-bit truncation of offsets.
  const char marker[] = "past-4GiB";
  ASSERT_EQ(::pwrite(fd, marker, sizeof marker, (4ull << 30) + 17), static_cast<ssize_t>(sizeof marker));
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
  ::close(fd);
  test::WriteFile(tmp / "src/small", "small");
  auto t0 = std::chrono::steady_clock::now();
  auto r = test::PackTree(tmp / "src", tmp / "img", 1, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto t1 = std::chrono::steady_clock::now();
  auto img = test::OpenOrDie(tmp / "img");
  ASSERT_TRUE(img);
  uint32_t id = *img->Lookup("huge.bin");
  Entry e = img->Get(id);
  EXPECT_EQ(e.size, size);
  EXPECT_EQ(e.codec, Codec::kChunked);
  EXPECT_EQ(img->ChunkCount(e), size >> 20);
  EXPECT_TRUE(img->CheckFile(id).ok());
  auto t2 = std::chrono::steady_clock::now();
  ClientOptions o;
  o.image = tmp / "img";
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok());
  auto f = (*client)->Open(id);
  ASSERT_TRUE(f.ok());
  char got[64] = {};
  // Straddling the chunk boundary at 4 GiB and the 32-bit wrap: 16 bytes before it, the marker after it.
  auto n = (*f)->ReadAt((4ull << 30) - 16, got, 16 + 17 + sizeof marker);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 16 + 17 + sizeof marker);
  EXPECT_EQ(std::memcmp(got + 16 + 17, marker, sizeof marker), 0);
  n = (*f)->ReadAt(size - 10, got, sizeof got);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 10u);
  EXPECT_EQ(got[9], 0);
  auto t3 = std::chrono::steady_clock::now();
  EXPECT_EQ(test::ReadImageFile(*img, "small"), "small");
  auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::printf("pack %.1f s, verify %.1f s, read %.1f s (stored %llu bytes)\n", sec(t0, t1), sec(t1, t2), sec(t2, t3),
              static_cast<unsigned long long>(e.stored_size));
}

}  // namespace
}  // namespace fanstore
