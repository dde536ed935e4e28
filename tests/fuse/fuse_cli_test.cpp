// `fanstore mount` as a user runs it: background by default, unmount by fusermount3 -u or a signal,
// and one clear line plus a non-zero exit for each way it can fail.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "fuse_test_env.hpp"
#include "fuse_test_util.hpp"

namespace fs = std::filesystem;

namespace fanstore::fusetest {
namespace {

// A fresh mount point under the shared temp dir.
std::string NewDir(const std::string& name) {
  const std::string d = Env().root + "/" + name;
  fs::create_directories(d);
  return d;
}

// Exactly one line, starting with the command's name.
void ExpectOneLineError(const RunResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_EQ(r.output.rfind("fanstore mount: ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

TEST(FuseCli, BackgroundMountThenFusermountUnmount) {
  const std::string mp = NewDir("bg");
  const RunResult r = RunCommand({CliPath(), "mount", "--image", Env().image, mp});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
  // The caller returns only once the mount is in place: no polling needed.
  EXPECT_TRUE(IsMounted(mp));
  EXPECT_EQ(ReadWholeFile(mp + "/hello.txt"), "hello, fanstore\n");
  const RunResult u = RunCommand({"/usr/bin/fusermount3", "-u", mp});
  EXPECT_EQ(u.exit_code, 0) << u.output;
  EXPECT_TRUE(WaitMounted(mp, false, kHangSeconds));
  EXPECT_TRUE(fs::is_empty(mp));
}

void ForegroundStopsOnSignal(int sig, const char* name) {
  const std::string mp = NewDir(std::string("fg-") + name);
  const std::string log = Env().root + "/fg-" + name + ".log";
  const pid_t pid = Spawn({CliPath(), "mount", "-f", "--threads", "4", "--image", Env().image, mp}, log);
  ASSERT_TRUE(WaitMounted(mp, true, kHangSeconds, pid)) << ReadWholeFile(log);
  EXPECT_EQ(ReadWholeFile(mp + "/docs/../hello.txt"), "hello, fanstore\n");
  ASSERT_EQ(::kill(pid, sig), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ": " << ReadWholeFile(log);
  EXPECT_FALSE(IsMounted(mp)) << "a signal must unmount";
}

TEST(FuseCli, ForegroundStopsAndUnmountsOnSigterm) { ForegroundStopsOnSignal(SIGTERM, "term"); }
TEST(FuseCli, ForegroundStopsAndUnmountsOnSigint) { ForegroundStopsOnSignal(SIGINT, "int"); }

TEST(FuseCli, ForegroundEndsWhenUnmountedFromOutside) {
  const std::string mp = NewDir("fg-ext");
  const std::string log = Env().root + "/fg-ext.log";
  const pid_t pid = Spawn({CliPath(), "mount", "-f", "--image", Env().image, mp}, log);
  ASSERT_TRUE(WaitMounted(mp, true, kHangSeconds, pid)) << ReadWholeFile(log);
  EXPECT_EQ(RunCommand({"/usr/bin/fusermount3", "-u", mp}).exit_code, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadWholeFile(log);
}

TEST(FuseCli, MissingMountPoint) {
  ExpectOneLineError(RunCommand({CliPath(), "mount", "--image", Env().image, Env().root + "/does-not-exist"}),
                     "does not exist");
}

TEST(FuseCli, MountPointIsAFile) {
  ExpectOneLineError(RunCommand({CliPath(), "mount", "--image", Env().image, Env().src + "/hello.txt"}),
                     "is not a directory");
}

TEST(FuseCli, NonEmptyMountPointNeedsOptionNonempty) {
  const std::string mp = NewDir("nonempty");
  WriteFile(mp + "/keep.txt", "x");
  ExpectOneLineError(RunCommand({CliPath(), "mount", "--image", Env().image, mp}), "not empty");
  // -o right before the mount point: it must take one value, not swallow the positional.
  const RunResult r = RunCommand({CliPath(), "mount", "--image", Env().image, "-o", "nonempty", mp});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(mp + "/hello.txt"));
  EXPECT_EQ(RunCommand({"/usr/bin/fusermount3", "-u", mp}).exit_code, 0);
  EXPECT_TRUE(WaitMounted(mp, false, kHangSeconds));
  EXPECT_TRUE(fs::exists(mp + "/keep.txt"));
}

TEST(FuseCli, BusyMountPoint) {
  // The shared mount is live for the whole run: mounting on top of it must be refused.
  ExpectOneLineError(RunCommand({CliPath(), "mount", "--image", Env().image, Env().mnt}), "busy");
  ExpectOneLineError(RunCommand({CliPath(), "mount", "-o", "nonempty", "--image", Env().image, Env().mnt}), "busy");
}

// A dead server's mount still answers stat of its root from the kernel's attribute cache: it must be named stale,
// not busy.
TEST(FuseCli, StaleMountIsNamedEvenWithItsRootCached) {
  const std::string mp = NewDir("stale");
  const std::string log = Env().root + "/stale.log";
  const pid_t pid = Spawn({CliPath(), "mount", "-f", "--image", Env().image, mp}, log);
  ASSERT_TRUE(WaitMounted(mp, true, kHangSeconds, pid)) << ReadWholeFile(log);
  struct stat st;
  ASSERT_EQ(::stat(mp.c_str(), &st), 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  ExpectOneLineError(RunCommand({CliPath(), "mount", "--image", Env().image, mp}), "is a stale FUSE mount");
  EXPECT_EQ(RunCommand({"/usr/bin/fusermount3", "-u", mp}).exit_code, 0);
}

// The command a message suggests can be pasted, whatever the mount point's name.
TEST(FuseCli, BusyMountPointSuggestsAQuotedCommand) {
  const std::string mp = NewDir("bu sy'q");
  ASSERT_EQ(RunCommand({CliPath(), "mount", "--image", Env().image, mp}).exit_code, 0);
  ExpectOneLineError(RunCommand({CliPath(), "mount", "--image", Env().image, mp}),
                     "`fusermount3 -u '" + Env().root + "/bu sy'\\''q'`");
  EXPECT_EQ(RunCommand({"/usr/bin/fusermount3", "-u", mp}).exit_code, 0);
}

// Alone (no --daemon), a partition that is not there gives EIO for its files: the mount says so before it detaches
// (the server's own reasons then go to /dev/null), and the other files are still served.
TEST(FuseCli, MissingPartitionIsNamedBeforeDetaching) {
  const std::string img = Env().root + "/img-no-part";
  fs::copy(Env().image, img, fs::copy_options::recursive);
  ASSERT_TRUE(fs::remove(img + "/part-00000.fsp"));
  const std::string mp = NewDir("nopart");
  const RunResult r = RunCommand({CliPath(), "mount", "--image", img, mp});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_EQ(r.output.rfind("fanstore mount: warning: 1 of ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("part-00000.fsp is missing"), std::string::npos) << r.output;
  EXPECT_TRUE(IsMounted(mp));
  EXPECT_EQ(RunCommand({"/usr/bin/fusermount3", "-u", mp}).exit_code, 0);
}

TEST(FuseCli, CacheBudgetOrThreadsOutOfRange) {
  for (const char* mib : {"-5", "17592186044416"}) {
    const std::string mp = NewDir(std::string("cache") + mib);
    ExpectOneLineError(RunCommand({CliPath(), "mount", "--cache-mib", mib, "--image", Env().image, mp}),
                       "--cache-mib " + std::string(mib) + " is outside");
    EXPECT_FALSE(IsMounted(mp));
  }
  const std::string mp = NewDir("threads");
  ExpectOneLineError(RunCommand({CliPath(), "mount", "--threads", "-1", "--image", Env().image, mp}),
                     "--threads -1 is outside 0-100000; use 0 for libfuse's default");
  EXPECT_FALSE(IsMounted(mp));
}

TEST(FuseCli, MissingFuseDevice) {
  // libfuse always opens /dev/fuse; the pre-check honours --fuse-device so the message can be tested.
  ExpectOneLineError(RunCommand({CliPath(), "mount", "--fuse-device", Env().root + "/no-fuse", "--image", Env().image,
                                 NewDir("nodev")}),
                     "FUSE is not available");
}

TEST(FuseCli, BadImage) {
  const RunResult r = RunCommand({CliPath(), "mount", "--image", Env().root + "/no-image", NewDir("noimage")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_FALSE(IsMounted(Env().root + "/noimage"));
}

TEST(FuseCli, BadFuseOption) {
  const std::string mp = NewDir("badopt");
  const RunResult r = RunCommand({CliPath(), "mount", "-o", "no_such_option", "--image", Env().image, mp});
  // libfuse writes that message in three pieces: they read as one (they were once joined as "`; -o; no_such_option'").
  ExpectOneLineError(r, "bad -o options: unknown option(s): `-o no_such_option'");
  EXPECT_FALSE(IsMounted(mp));
}

TEST(FuseCli, MissingDaemonIsOneLineAndNoMount) {
  const std::string mp = NewDir("daemon");
  const RunResult r = RunCommand({CliPath(), "mount", "--daemon", Env().root + "/no-daemon.sock", mp});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("no-daemon.sock"), std::string::npos) << r.output;
  EXPECT_FALSE(IsMounted(mp));
}

TEST(FuseCli, NeedsImageOrDaemon) { ExpectOneLineError(RunCommand({CliPath(), "mount", NewDir("noargs")}), "--image"); }

}  // namespace
}  // namespace fanstore::fusetest
