// Entry point of fuse_test: builds and mounts the shared image, runs the tests, or exits 77 (ctest SKIP)
// with a loud message where this machine cannot mount FUSE at all.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <gtest/gtest.h>

#include "fanstore/pack.hpp"
#include "fuse_preflight.hpp"
#include "fuse_test_env.hpp"
#include "fuse_test_util.hpp"

namespace fanstore::fusetest {
namespace {
MountedImage g_env;

int Skip(const std::string& why) {
  std::cerr << "\n"
               "************************************************************************\n"
               "*** SKIPPED: the FUSE tests need a mountable FUSE and this machine has none.\n"
               "*** "
            << why
            << "\n"
               "************************************************************************\n\n";
  return 77;
}
}  // namespace

const MountedImage& Env() { return g_env; }

}  // namespace fanstore::fusetest

int main(int argc, char** argv) {
  using namespace fanstore::fusetest;
  testing::InitGoogleTest(&argc, argv);
  if (fanstore::Status s = fanstore::mount::CheckFuseDevice("/dev/fuse"); !s.ok()) return Skip(s.ToString());

  g_env.root = MakeTempDir("fuse-test");
  g_env.src = g_env.root + "/src";
  g_env.image = g_env.root + "/image";
  g_env.mnt = g_env.root + "/mnt";
  MakeSourceTree(g_env.src);
  fanstore::PackOptions po;
  po.source = g_env.src;
  po.output = g_env.image;
  po.parts = 2;
  po.threads = 2;
  auto packed = fanstore::Pack(po);
  if (!packed.ok()) {
    std::cerr << "pack failed: " << packed.status().ToString() << "\n";
    return 1;
  }
  CorruptStoredFile(g_env.image, "bad.bin");
  std::filesystem::create_directories(g_env.mnt);

  const std::string log = g_env.root + "/mount.log";
  g_env.server = Spawn({CliPath(), "mount", "-f", "--image", g_env.image, g_env.mnt}, log);
  if (!WaitMounted(g_env.mnt, true, kHangSeconds, g_env.server)) {
    std::string out;
    try {
      out = ReadWholeFile(log);
    } catch (...) {
    }
    ::kill(g_env.server, SIGTERM);
    ::waitpid(g_env.server, nullptr, 0);
    RemoveTree(g_env.root);
    // Containers without CAP_SYS_ADMIN and without a usable fusermount3 cannot mount at all.
    if (out.find("not permitted") != std::string::npos || out.find("Permission denied") != std::string::npos)
      return Skip("mounting is not permitted here: " + out);
    std::cerr << "fanstore mount -f did not mount: " << out << "\n";
    return 1;
  }

  const int rc = RUN_ALL_TESTS();

  ::kill(g_env.server, SIGTERM);
  int status = 0;
  ::waitpid(g_env.server, &status, 0);
  const bool unmounted = WaitMounted(g_env.mnt, false, kHangSeconds);
  if (const char* keep = std::getenv("FANSTORE_TEST_KEEP"); !(keep && *keep)) RemoveTree(g_env.root);
  if (!unmounted || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "the mount server did not stop cleanly on SIGTERM\n";
    return 1;
  }
  return rc;
}
