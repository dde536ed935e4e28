// `fanstore run`: run an unmodified program with the image served under a path prefix (LD_PRELOAD).
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"
#include "fanstore/daemon_client.hpp"
#include "fanstore/env.hpp"
#include "fanstore/image.hpp"
#include "fanstore/path.hpp"
#include "run_env.hpp"

namespace fanstore::cli {
namespace {

struct RunArgs {
  std::string image;
  std::string daemon;  // Unix socket of this node's `fanstore serve`: the image then comes from the daemon
  std::string mount = env::kDefaultMount;
  bool stats = false;
  std::string log;
  std::vector<std::string> command;
};

// The preload library sits in ../lib next to bin/ in both the build tree and an install.
std::string FindPreloadLibrary() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return {};
  exe[n] = '\0';
  std::string dir(exe);
  dir.resize(dir.rfind('/'));
  for (const char* rel : {"/../lib/libfanstore_preload.so", "/libfanstore_preload.so"}) {
    std::string p = dir + rel;
    char real[PATH_MAX];
    if (realpath(p.c_str(), real)) return real;
  }
  return {};
}

int Run(const RunArgs& a) {
  if (a.image.empty() == a.daemon.empty()) return Fail("run", "give exactly one of --image (one node) or --daemon (multi-node)");
  char abs_image[PATH_MAX] = "";
  char abs_socket[PATH_MAX] = "";
  if (!a.daemon.empty()) {
    if (!realpath(a.daemon.c_str(), abs_socket))
      return Fail("run", "daemon socket '" + a.daemon + "': " + std::strerror(errno) +
                             " (is `fanstore serve` running and ready? try `fanstore wait " + a.daemon + "`)");
    // Handshake once here so a missing or wedged daemon is one clear line now, not an error in every child.
    auto info = ProbeDaemon(abs_socket, 5000);
    if (!info.ok()) return Fail("run", info.status());
    if (auto img = Image::Open(info->index_dir); img.ok()) PrepareRunEnvironment(**img);
  } else {
    if (!realpath(a.image.c_str(), abs_image))
      return Fail("run", "image '" + a.image + "': " + std::strerror(errno) + " (give the directory written by fanstore pack)");
    // Open it here once so a bad image is one clear line now, not a failure inside every child process.
    auto img = Image::Open(abs_image);
    if (!img.ok()) return Fail("run", img.status());
    PrepareRunEnvironment(**img);
  }
  if (a.mount.empty() || a.mount[0] != '/') return Fail("run", "--mount must be an absolute path, got '" + a.mount + "'");
  std::string lib = FindPreloadLibrary();
  if (lib.empty()) return Fail("run", "libfanstore_preload.so not found next to this fanstore binary (../lib/): rebuild with scripts/build.sh");

  std::string preload = lib;
  if (const char* old = getenv("LD_PRELOAD"); old && *old) preload += std::string(":") + old;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  if (abs_socket[0]) {
    setenv(env::kDaemon, abs_socket, 1);
    unsetenv(env::kImage);
  } else {
    setenv(env::kImage, abs_image, 1);
    unsetenv(env::kDaemon);
  }
  setenv(env::kMount, NormalizeAbsolute(a.mount).c_str(), 1);
  if (a.stats) setenv(env::kStats, "1", 1);
  if (!a.log.empty()) setenv(env::kLog, a.log.c_str(), 1);

  std::vector<char*> argv;
  for (const auto& s : a.command) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  int err = errno;
  Fail("run", "cannot run '" + a.command[0] + "': " + std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

}  // namespace

void AddRunCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand("run", "Run a command with the image served under --mount (--image: one node; --daemon: through the node's daemon)");
  sub->add_option("--image", args->image, "Image directory written by `fanstore pack` (one node)");
  sub->add_option("--daemon", args->daemon, "Unix socket of this node's `fanstore serve` (multi-node; sets FANSTORE_DAEMON)");
  sub->add_option("--mount", args->mount, "Path prefix the image appears under (need not exist)")->capture_default_str();
  sub->add_flag("--stats", args->stats, "Print one summary line per process at exit (FANSTORE_STATS=1)");
  sub->add_option("--log", args->log, "Trace level (debug traces every call on the image: FANSTORE_LOG)");
  sub->add_option("command", args->command, "The command and its arguments, after --")->required()->expected(-1);
  sub->callback([args, &exit_code] { exit_code = Run(*args); });
}

}  // namespace fanstore::cli
