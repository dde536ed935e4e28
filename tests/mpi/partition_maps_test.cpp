// PartitionMaps: ranges come from the staged files' mappings, and a writer of a staged file turns its mapping off
// without ever making a send read past the file's end.
#include "partition_maps.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fanstore/image.hpp"
#include "fanstore/pack.hpp"

namespace fanstore::daemon {
namespace {

bool LeasesDisabled() {
  std::ifstream f("/proc/sys/fs/leases-enable");
  int on = 1;
  return f >> on && on == 0;
}

// Steps `maps` as the daemon's progress loop does (CheckLeases, then a short wait) until `done` or 10 s; `done`'s
// last answer.
bool StepUntil(PartitionMaps& maps, const std::function<bool()>& done, int wait_ms = 1) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < until) {
    maps.CheckLeases();
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
  return done();
}

// StepUntil the forked `child` exits; its pid when it did (status in *status), 0 when it was still running.
pid_t StepUntilExited(PartitionMaps& maps, pid_t child, int* status, int wait_ms = 1) {
  pid_t got = 0;
  StepUntil(
      maps, [&] { return got != 0 || (got = waitpid(child, status, WNOHANG)) != 0; }, wait_ms);
  return got;
}

// What staging does as each partition completes.
void MapAll(PartitionMaps& maps) {
  for (uint32_t p = 0; p < 2; ++p) maps.Map(p);
}

std::string FileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class PartitionMapsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (LeasesDisabled()) GTEST_SKIP() << "file leases are disabled here (/proc/sys/fs/leases-enable is 0)";
    // On tmpfs where there is one: only node-local file systems are mapped, and /tmp may be an overlay.
    struct stat shm;
    std::string base =
        stat("/dev/shm", &shm) == 0 && S_ISDIR(shm.st_mode) && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl_s = base + "/fanstore-maps-XXXXXX";
    std::vector<char> tmpl(tmpl_s.begin(), tmpl_s.end());
    tmpl.push_back('\0');
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl.data();
    std::string src = dir_ + "/src";
    ASSERT_EQ(mkdir(src.c_str(), 0700), 0);
    uint32_t seed = 7;
    for (int i = 0; i < 8; ++i) {
      std::string bytes(200000 + i * 1000, '\0');
      for (char& c : bytes) c = static_cast<char>((seed = seed * 1103515245u + 12345u) >> 16);
      std::ofstream(src + "/f" + std::to_string(i), std::ios::binary) << bytes;
    }
    PackOptions po;
    po.source = src;
    po.output = dir_ + "/img";
    po.parts = 2;
    po.level = 0;
    po.threads = 1;
    ASSERT_TRUE(Pack(po).ok());
    auto img = Image::Open(po.output);
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    img_ = std::move(img).value();
  }
  void TearDown() override {
    if (!dir_.empty()) std::system(("rm -rf " + dir_).c_str());
  }
  std::string dir_;
  std::shared_ptr<const Image> img_;
};

TEST_F(PartitionMapsTest, RangesAreTheStagedFilesBytes) {
  PartitionMaps maps(*img_);
  ASSERT_EQ(maps.mapped(), 0u);  // nothing before staging says a partition is complete: an old file may differ
  MapAll(maps);
  ASSERT_EQ(maps.mapped(), 2u);
  for (uint32_t p = 0; p < 2; ++p) {
    std::string want = FileBytes(img_->PartitionPath(p));
    ASSERT_GT(want.size(), 4096u);
    const char* all = maps.Pin(p, 0, want.size());
    ASSERT_NE(all, nullptr);
    EXPECT_EQ(std::string(all, want.size()), want);
    const char* tail = maps.Pin(p, want.size() - 100, 100);
    ASSERT_NE(tail, nullptr);
    EXPECT_EQ(std::string(tail, 100), want.substr(want.size() - 100));
    EXPECT_EQ(maps.Pin(p, want.size() - 100, 101), nullptr) << "a range past the end must not be mapped";
    EXPECT_EQ(maps.Pin(p, want.size() + 1, 0), nullptr);
    maps.Unpin(p);
    maps.Unpin(p);
  }
  EXPECT_EQ(maps.Pin(2, 0, 1), nullptr) << "no such partition";
}

// Turned off (the transport could not send from a mapping), partitions staged later are not mapped either: each
// would cost an asker a timed-out attempt.
TEST_F(PartitionMapsTest, TurnedOffItMapsNothingStagedLater) {
  PartitionMaps maps(*img_);
  maps.Map(0);
  ASSERT_EQ(maps.mapped(), 1u);
  maps.TurnOff();
  MapAll(maps);
  EXPECT_EQ(maps.mapped(), 0u);
  EXPECT_EQ(maps.Pin(1, 0, 1), nullptr);
}

// A process truncates a staged partition while a send from its mapping is in flight: it is held back until that
// send is over (the bytes stay readable meanwhile), the partition is never sent from its mapping again, and once
// the send is done the truncation goes through at once (not after the kernel's 45 s lease-break time).
TEST_F(PartitionMapsTest, ATruncationWaitsForTheSendInFlightThenTheMappingIsOff) {
  PartitionMaps maps(*img_);
  MapAll(maps);
  ASSERT_EQ(maps.mapped(), 2u);
  std::string path = img_->PartitionPath(0);
  std::string want = FileBytes(path);
  const char* in_flight = maps.Pin(0, 0, want.size());
  ASSERT_NE(in_flight, nullptr);

  int done[2];
  ASSERT_EQ(pipe(done), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = truncate(path.c_str(), 0);
    char c = rc == 0 ? 'y' : 'n';
    (void)!write(done[1], &c, 1);
    _exit(0);
  }
  close(done[1]);
  auto finished = [&](int wait_ms) {
    struct pollfd pfd = {done[0], POLLIN, 0};
    return poll(&pfd, 1, wait_ms) == 1;
  };

  // The kernel signals the lease break; the next CheckLeases turns the mapping off.
  StepUntil(maps, [&] { return maps.mapped() != 2; });
  ASSERT_EQ(maps.mapped(), 1u) << "the lease break was never noticed";
  EXPECT_EQ(maps.Pin(0, 0, 1), nullptr) << "a partition being written must not be sent from its mapping";
  EXPECT_NE(maps.Pin(1, 0, 1), nullptr) << "the other partition stays mapped";
  maps.Unpin(1);

  EXPECT_FALSE(finished(300)) << "the truncation went through while a send from the mapping was in flight";
  EXPECT_EQ(std::string(in_flight, want.size()), want);

  maps.Unpin(0);  // the send is over: the lease goes back
  ASSERT_TRUE(finished(10000)) << "the writer was still held 10 s after the last send was over";
  char c = 0;
  ASSERT_EQ(read(done[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  close(done[0]);
  int status = 0;
  waitpid(child, &status, 0);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
}

// A send that never completes (its asker stopped) must not let the kernel's lease-break time expire under a
// mapping: halfway there its pages become zeros of our own and the writer goes on. Reading the pinned range after
// the truncation then gives zeros, never SIGBUS. (Here "halfway" is 200 ms instead of 22.5 s.)
TEST_F(PartitionMapsTest, ASendThatNeverEndsReadsZerosOnceTheWriterIsLetGo) {
  PartitionMaps maps(*img_, /*break_grace_ms=*/200);
  MapAll(maps);
  ASSERT_EQ(maps.mapped(), 2u);
  std::string path = img_->PartitionPath(0);
  const uint64_t size = FileBytes(path).size();
  const char* stuck = maps.Pin(0, 0, size);
  ASSERT_NE(stuck, nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(truncate(path.c_str(), 0) == 0 ? 0 : 1);
  int status = 0;
  ASSERT_EQ(StepUntilExited(maps, child, &status, /*wait_ms=*/5), child)
      << "the writer was still held after 10 s with a send stuck in flight";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(maps.mapped(), 1u);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(std::string(stuck, size), std::string(size, '\0')) << "the stuck send must read zeros, not fault";
  maps.Unpin(0);
}

// With no send in flight, a writer is let go at the next CheckLeases (the daemon's next progress step).
TEST_F(PartitionMapsTest, AWriterIsLetGoAtOnceWhenNothingIsInFlight) {
  PartitionMaps maps(*img_);
  MapAll(maps);
  ASSERT_EQ(maps.mapped(), 2u);
  std::string path = img_->PartitionPath(1);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int fd = open(path.c_str(), O_WRONLY);  // opening for writing is enough to break a read lease
    _exit(fd >= 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(StepUntilExited(maps, child, &status), child) << "the writer was still held after 10 s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(maps.mapped(), 1u);
  EXPECT_EQ(maps.Pin(1, 0, 1), nullptr);
  EXPECT_NE(maps.Pin(0, 0, 1), nullptr);
  maps.Unpin(0);
}

}  // namespace
}  // namespace fanstore::daemon
