// Unit tests of `fanstore serve --cache-prefault`: the fetch cache's pages are allocated ahead of use, its bytes stay
// as they were (also through the fallocate fallback of kernels before 5.14), a stop is honoured between steps, and the
// memory taken is bounded by what the kernel reports available.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

#include "cache_prefault.hpp"
#include "fetch_cache.hpp"

namespace fanstore::daemon {
namespace {

const std::function<bool()> kNever = [] { return false; };

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

  uint64_t done = 0;
  ASSERT_TRUE(PrefaultCache(*cache.arena(), kCache, kNever, &done).ok());
  EXPECT_EQ(done, cache.arena()->data_len());
  EXPECT_GE(Allocated(cache.shared_fd()), cache.arena()->data_len());

  FetchCache::Tag t;
  const char* got = cache.Find({2, 4096, 100000}, &t);
  ASSERT_NE(got, nullptr);
  for (int i = 0; i < 100000; ++i) ASSERT_EQ(got[i], static_cast<char>(i * 7 + 1)) << "byte " << i;
}

TEST(CachePrefault, FaultsInNoMoreThanAsked) {
  FetchCache cache(64 << 20);
  uint64_t done = 0;
  ASSERT_TRUE(PrefaultCache(*cache.arena(), 6 << 20, kNever, &done).ok());  // three steps of 2 MiB
  EXPECT_EQ(done, uint64_t{6} << 20);
  EXPECT_LT(Allocated(cache.shared_fd()), uint64_t{16} << 20);
}

TEST(CachePrefault, StopsBetweenStepsWhenTold) {
  // 1 GiB asked for (sparse until faulted in), a stop after three steps: ignoring it would fault in all of it.
  const uint64_t kCache = uint64_t{1} << 30;
  FetchCache cache(kCache);
  ASSERT_NE(cache.arena(), nullptr);
  int asked = 0;
  uint64_t done = 1;
  ASSERT_TRUE(PrefaultCache(
                  *cache.arena(), kCache, [&] { return ++asked > 3; }, &done)
                  .ok());
  EXPECT_EQ(done, uint64_t{6} << 20) << "it stops between whole steps, when told";
  EXPECT_LT(Allocated(cache.shared_fd()), kCache / 4);
}

#if defined(__x86_64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kNativeArch = AUDIT_ARCH_AARCH64;
#else
constexpr uint32_t kNativeArch = 0;
#endif

constexpr int kMadvPopulateWrite = 23;  // Linux 5.14's MADV_POPULATE_WRITE (older headers lack it)

// Makes madvise(MADV_POPULATE_WRITE) fail with EINVAL in this process, as on a kernel older than 5.14.
bool RefuseMadvPopulateWrite() {
  sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kNativeArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2])),  // the advice's low 32 bits
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kMadvPopulateWrite, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof f / sizeof f[0]), f};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0;
}

// The fallocate fallback, run where madvise(MADV_POPULATE_WRITE) is refused (a seccomp filter, in a child process
// so that the filter stays there): the pages are allocated all the same and cached bytes are left alone.
TEST(CachePrefault, OnAKernelWithoutMadvPopulateWriteFallsBackToFallocate) {
  if (kNativeArch == 0) GTEST_SKIP() << "no seccomp architecture constant for this CPU";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const uint64_t kCache = 16 << 20;
    FetchCache cache(kCache);
    if (!cache.arena()) _exit(10);
    CacheBuffer b = cache.Allocate(100000);
    if (!b.mem) _exit(11);
    for (int i = 0; i < 100000; ++i) b.mem.data()[i] = static_cast<char>(i * 3 + 5);
    b.data = b.mem.data();
    if (!cache.Insert({1, 0, 100000}, std::move(b), {})) _exit(12);
    if (Allocated(cache.shared_fd()) >= kCache / 2) _exit(13);
    if (!RefuseMadvPopulateWrite()) _exit(14);
    void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (madvise(page, 4096, kMadvPopulateWrite) == 0 || errno != EINVAL)
      _exit(15);  // the filter works: the fallback is what runs
    uint64_t done = 0;
    if (!PrefaultCache(*cache.arena(), kCache, kNever, &done).ok() || done != cache.arena()->data_len()) _exit(16);
    if (Allocated(cache.shared_fd()) < cache.arena()->data_len()) _exit(17);
    FetchCache::Tag t;
    const char* got = cache.Find({1, 0, 100000}, &t);
    if (!got) _exit(18);
    for (int i = 0; i < 100000; ++i)
      if (got[i] != static_cast<char>(i * 3 + 5)) _exit(19);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "the child died of signal " << WTERMSIG(st);
  // 14: seccomp unavailable here (a container that forbids it); the others name the check that failed, above.
  if (WEXITSTATUS(st) == 14) GTEST_SKIP() << "seccomp filters are not allowed here";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "the child's check number " << WEXITSTATUS(st) << " failed (see the test)";
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
