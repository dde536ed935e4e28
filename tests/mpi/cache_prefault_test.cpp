// Unit tests of `fanstore serve --cache-prefault`: the node cache's pages are allocated ahead of use, its bytes stay
// as they were, a stop is honoured, and the memory taken is bounded by what the kernel reports available.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cache_prefault.hpp"
#include "fetch_cache.hpp"

namespace fanstore::daemon {
namespace {

// Bytes of the memfd the kernel has allocated pages for.
uint64_t Allocated(int fd) {
  struct stat st {};
  EXPECT_EQ(fstat(fd, &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST(CachePrefault, AllocatesTheWholeCacheAndLeavesCachedBytesAlone) {
  const uint64_t kCache = 16 << 20;
  FetchCache cache(kCache);
  ASSERT_NE(cache.arena(), nullptr);
  CacheBuffer b = cache.Allocate(100000);
  ASSERT_TRUE(b.mem);
  for (int i = 0; i < 100000; ++i) b.mem.data()[i] = static_cast<char>(i * 7 + 1);
  b.data = b.mem.data();
  ASSERT_TRUE(cache.Insert({2, 4096, 100000}, std::move(b), {}));
  uint64_t before = Allocated(cache.shared_fd());
  EXPECT_LT(before, kCache / 2) << "a fresh cache must not have its memory allocated yet (else this shows nothing)";

  CachePrefault p(cache.arena(), kCache);
  uint64_t done = 0;
  double sec = -1;
  ASSERT_TRUE(p.Wait(&done, &sec).ok());
  EXPECT_EQ(done, cache.arena()->data_len());
  EXPECT_GE(sec, 0);
  EXPECT_GE(Allocated(cache.shared_fd()), cache.arena()->data_len());

  FetchCache::Tag t;
  const char* got = cache.Find({2, 4096, 100000}, &t);
  ASSERT_NE(got, nullptr);
  for (int i = 0; i < 100000; ++i) ASSERT_EQ(got[i], static_cast<char>(i * 7 + 1)) << "byte " << i;
}

TEST(CachePrefault, FaultsInNoMoreThanAsked) {
  FetchCache cache(64 << 20);
  {
    CachePrefault p(cache.arena(), 6 << 20);  // three steps of 2 MiB
    uint64_t done = 0;
    ASSERT_TRUE(p.Wait(&done, nullptr).ok());
    EXPECT_EQ(done, uint64_t{6} << 20);
    EXPECT_LT(Allocated(cache.shared_fd()), uint64_t{16} << 20);
  }
}

TEST(CachePrefault, StopsWithinAFewStepsOfBeingTold) {
  // 1 GiB asked for (sparse until faulted in), a stop right after the start: ignoring it would fault in all of
  // it, some 100 ms and more of work; honouring it ends at the next 2 MiB step.
  const uint64_t kCache = uint64_t{1} << 30;
  FetchCache cache(kCache);
  ASSERT_NE(cache.arena(), nullptr);
  CachePrefault p(cache.arena(), kCache);
  p.Stop();
  uint64_t done = 1;
  ASSERT_TRUE(p.Wait(&done, nullptr).ok());
  EXPECT_EQ(done % (2u << 20), 0u) << "it stops between whole steps";
  EXPECT_LT(done, kCache / 4) << "the stop was not honoured";
  EXPECT_LT(Allocated(cache.shared_fd()), kCache / 4);
}

TEST(CachePrefault, ARangePastTheCachesEndIsRefused) {
  FetchCache cache(4 << 20);
  const SharedArena* a = cache.arena();
  EXPECT_EQ(a->Prefault(a->data_len(), 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(a->Prefault(4096, a->data_len()).code(), Code::kInvalidArgument);
  EXPECT_TRUE(a->Prefault(a->data_len() - 4096, 4096).ok());
}

TEST(CachePrefault, TakesAtMostHalfOfTheAvailableMemory) {
  char dir[] = "/tmp/fanstore-meminfo-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string with = std::string(dir) + "/with", without = std::string(dir) + "/without";
  FILE* f = std::fopen(with.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("MemTotal:       4000000 kB\nMemFree:         100 kB\nMemAvailable:    1000000 kB\n", f);
  std::fclose(f);
  f = std::fopen(without.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("MemTotal:       4000000 kB\n", f);
  std::fclose(f);
  EXPECT_EQ(PrefaultBudget(uint64_t{1} << 30, with.c_str()), uint64_t{500000} * 1024);
  EXPECT_EQ(PrefaultBudget(uint64_t{1} << 20, with.c_str()), uint64_t{1} << 20);
  EXPECT_EQ(PrefaultBudget(uint64_t{1} << 20, without.c_str()), 0u) << "unknown available memory: nothing up front";
  EXPECT_EQ(PrefaultBudget(uint64_t{1} << 20, (std::string(dir) + "/none").c_str()), 0u);
  unlink(with.c_str());
  unlink(without.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace fanstore::daemon
