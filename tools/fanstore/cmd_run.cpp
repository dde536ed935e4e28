// `fanstore run`: run an unmodified program with the image served under a path prefix (LD_PRELOAD).
#include <limits.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"
#include "fanstore/beside_program.hpp"
#include "fanstore/daemon_client.hpp"
#include "fanstore/env.hpp"
#include "fanstore/image.hpp"
#include "fanstore/path.hpp"
#include "fanstore/path_template.hpp"
#include "fanstore/program_probe.hpp"
#include "outer_run.hpp"
#include "run_env.hpp"
#include "run_fuse.hpp"

namespace fanstore::cli {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;

struct RunArgs {
  std::string image;
  std::string daemon;  // Unix socket of this node's `fanstore serve`: the image then comes from the daemon
  std::string mount = env::kDefaultMount;
  bool stats = false;
  std::string log;
  std::string fuse = "auto";         // auto: FUSE only for programs LD_PRELOAD cannot reach; always; never
  std::optional<std::string> argv0;  // hidden: argv[0] for the program (the interposer's exec hand-over keeps it)
  std::vector<std::string> command;
};

// "statically linked", etc. as the first half of an error line: "/bin/busybox is statically linked".
std::string Unreachable(const ProgramProbe& p) {
  std::string why = p.program + " is " + p.why;
  if (p.reach == PreloadReach::kSecure) why = p.program + " runs with " + p.why + " (the loader ignores LD_PRELOAD)";
  return why;
}

// Where an install puts the preload library, relative to the `fanstore` binary (cmake/FanStoreInstall.cmake: from
// CMAKE_INSTALL_BINDIR to CMAKE_INSTALL_LIBDIR, e.g. ../lib or ../lib64).
#ifndef FANSTORE_PRELOAD_FROM_BIN
#define FANSTORE_PRELOAD_FROM_BIN "../lib"
#endif

// The preload library sits in ../lib next to bin/ in the build tree, and in FANSTORE_PRELOAD_FROM_BIN in an install.
std::string FindPreloadLibrary() {
  for (const std::string& p : PathsBesideProgram("libfanstore_preload.so", FANSTORE_PRELOAD_FROM_BIN)) {
    char real[PATH_MAX];
    if (realpath(p.c_str(), real)) return real;
  }
  return {};
}

// The system directory (or the user's home) a mount at `mount` would cover (the prefix itself or one below it), or
// empty. The interposer hides everything under the prefix from the job, so `/`, `/usr` or `/etc` would take the
// shell, the loader's libraries and the tools the job runs away from it; FanStore itself must stay visible too (the
// interposer hands static programs back to the fanstore binary).
std::string HiddenSystemPath(const std::string& mount) {
  if (mount == "/") return mount;
  std::vector<std::string> needed = {
      "/bin", "/dev", "/etc", "/lib", "/lib32",   "/lib64",   "/libx32",      "/proc",     "/run",       "/sbin",
      "/sys", "/tmp", "/usr", "/var", "/usr/bin", "/usr/lib", "/usr/libexec", "/usr/sbin", "/usr/lib64", "/usr/lib32"};
  char self[PATH_MAX];
  if (ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1); n > 0) {
    self[n] = '\0';
    needed.emplace_back(self);
  }
  // The user's home: shells, Python's user site and ssh read it (a prefix below it is fine).
  if (const char* home = getenv("HOME"); home && home[0] == '/')
    if (std::string h = NormalizeAbsolute(home); h != "/") needed.push_back(std::move(h));
  for (const std::string& dir : needed)
    if (ClassifyPath(dir, mount, "/").cls == PathClass::kOurs) return dir;  // at or under the prefix
  return {};
}

// A run inside a run with another image or prefix: the interposer serves one image per process tree, so the inner run
// would take the outer image away from its program, silently. Fine when the outer prefix is a real FUSE mount (the
// outer run's --fuse always): the kernel keeps serving it. The same image at the same prefix (the interposer's
// hand-over of a static program, a script that calls `fanstore run` again) changes nothing.
int RefuseNested(const OuterRun& outer, const std::string& image, const std::string& daemon, const std::string& mount) {
  if (!outer.present()) return 0;
  if (outer.mount == mount && (outer.daemon.empty() ? outer.image == image : outer.daemon == daemon)) return 0;
  struct statfs sf;
  if (statfs(outer.mount.c_str(), &sf) == 0 && sf.f_type == kFuseSuperMagic) return 0;
  return Fail("run", "already under `" + outer.Words() + "`, and the interposer serves one image per process tree, " +
                         "so " + outer.mount + " would vanish for the program: under that run, mount this image " +
                         "with FUSE instead (`fanstore mount " +
                         (daemon.empty() ? "--image " + image : "--daemon " + daemon) +
                         " DIR`, DIR an empty directory) and use it there");
}

int Run(const RunArgs& a) {
  if (a.image.empty() == a.daemon.empty())
    return Fail("run", "give exactly one of --image (one node) or --daemon (multi-node)");
  if (a.mount.empty() || a.mount[0] != '/')
    return Fail("run", "--mount must be an absolute path, got '" + a.mount + "': give the prefix, e.g. /fanstore");
  if (std::string hidden = HiddenSystemPath(NormalizeAbsolute(a.mount)); !hidden.empty())
    return Fail("run", "--mount " + a.mount + " would hide " + (hidden == "/" ? "the whole file system" : hidden) +
                           " from the program, which it and the system need: give a prefix of its own, such as "
                           "/fanstore (the default) or /data/NAME");
  if (std::string why = CheckRunVariables(); !why.empty()) return Fail("run", why);
  const OuterRun outer = FindOuterRun();
  char abs_image[PATH_MAX] = "";
  char abs_socket[PATH_MAX] = "";
  bool libraries = false;  // the image holds shared libraries: the loader needs the audit module
  if (!a.daemon.empty()) {
    auto socket = ExpandNodeTemplate(a.daemon);  // "{node}": this node's daemon when nodes share a host
    if (!socket.ok()) return Fail("run", socket.status());
    if (!realpath(socket->c_str(), abs_socket))
      return Fail("run", "daemon socket '" + *socket + "': " + std::strerror(errno) +
                             " (is `fanstore serve` running and ready? try `fanstore wait " + a.daemon + "`)");
    if (int rc = RefuseNested(outer, "", abs_socket, NormalizeAbsolute(a.mount)); rc != 0) return rc;
    // Handshake once here so a missing or wedged daemon is one clear line now, not an error in every child.
    auto info = ProbeDaemon(abs_socket, 5000);
    if (!info.ok()) return Fail("run", info.status());
    if (auto img = Image::Open(info->index_dir); img.ok()) {
      PrepareRunEnvironment(**img, false);
      libraries = (*img)->HoldsSharedLibraries();
    }
  } else {
    if (!realpath(a.image.c_str(), abs_image))
      return Fail(
          "run", "image '" + a.image + "': " + std::strerror(errno) + " (give the directory written by fanstore pack)");
    if (int rc = RefuseNested(outer, abs_image, "", NormalizeAbsolute(a.mount)); rc != 0) return rc;
    // Open it here once so a bad image is one clear line now, not a failure inside every child process.
    auto img = Image::Open(abs_image);
    if (!img.ok()) return Fail("run", img.status());
    PrepareRunEnvironment(**img, true);
    libraries = (*img)->HoldsSharedLibraries();
  }
  std::string lib = FindPreloadLibrary();
  if (lib.empty())
    return Fail("run",
                "libfanstore_preload.so not found next to this fanstore binary (../lib/ or " FANSTORE_PRELOAD_FROM_BIN
                "/): rebuild with scripts/build.sh or reinstall");

  // The loader splits LD_PRELOAD (and LD_AUDIT) at spaces and colons and has no escape: such a path would be
  // dropped with a warning in every process, which would then run without the image.
  if (lib.find_first_of(" :") != std::string::npos)
    return Fail("run", "FanStore is installed under a path with a space or ':' (" + lib +
                           "), which LD_PRELOAD cannot carry: install or unpack it under a path without them");
  std::string preload = lib;
  if (const char* old = getenv("LD_PRELOAD"); old && *old) preload += std::string(":") + old;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  // The loader maps shared libraries with system calls of its own: its audit interface hands it those of the
  // image (interpose/audit.cpp). Only for an image that holds any: the module costs every exec ~0.5 ms.
  if (std::string audit = lib.substr(0, lib.rfind('/') + 1) + "libfanstore_audit.so";
      libraries && access(audit.c_str(), R_OK) == 0) {
    if (const char* old = getenv("LD_AUDIT"); old && *old) audit += std::string(":") + old;
    setenv("LD_AUDIT", audit.c_str(), 1);
  }
  if (abs_socket[0]) {
    setenv(env::kDaemon, abs_socket, 1);
    unsetenv(env::kImage);
  } else {
    setenv(env::kImage, abs_image, 1);
    unsetenv(env::kDaemon);
  }
  setenv(env::kMount, NormalizeAbsolute(a.mount).c_str(), 1);
  if (a.stats) setenv(env::kStats, "1", 1);
  if (!a.log.empty() && a.log != "debug" && a.log != "off")
    return Fail("run", "--log must be debug (or off), got '" + a.log + "'");
  if (a.log == "debug") setenv(env::kLog, "debug", 1);
  if (a.log == "off") unsetenv(env::kLog);  // over an inherited FANSTORE_LOG=debug

  // The interposer must see the fanstore binary to hand static programs it execs over to `fanstore run`.
  char self[PATH_MAX];
  if (ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1); n > 0) {
    self[n] = '\0';
    setenv(env::kRunBinary, self, 1);
  }

  // Programs the preload cannot reach get the image through FUSE, in a mount namespace of their own.
  if (a.fuse != "auto" && a.fuse != "always" && a.fuse != "never")
    return Fail("run", "--fuse must be auto, always or never, got '" + a.fuse + "'");
  // A relative program with a slash is found from the working directory, as execve finds it: the virtual one of an
  // enclosing run (the kernel's cwd of this binary is not that), else the real one. Absolute from here on, so the
  // probe, the check for a program stored in the image and the exec see the same file; its argv[0] stays as given.
  std::vector<std::string> command = a.command;
  if (command[0][0] != '/' && command[0].find('/') != std::string::npos) {
    std::string cwd;
    char buf[PATH_MAX];
    if (const char* v = getenv(env::kCwd); outer.present() && v && *v == '/') cwd = v;
    else if (getcwd(buf, sizeof buf) != nullptr) cwd = buf;
    if (!cwd.empty()) command[0] = (cwd == "/" ? std::string() : cwd) + "/" + command[0];
  }
  const std::string& argv0 = a.argv0 ? *a.argv0 : a.command[0];
  ProgramProbe probe = ProbeProgram(command[0]);
  // A program stored in the image exists only under the prefix: the kernel can exec it only from a mount.
  const std::string prefix = NormalizeAbsolute(a.mount);
  const std::string prog =
      probe.program.empty() || probe.program[0] != '/' ? std::string() : NormalizeAbsolute(probe.program);
  if (probe.reach == PreloadReach::kReached && !prog.empty() && prog.compare(0, prefix.size(), prefix) == 0 &&
      (prog.size() == prefix.size() || prog[prefix.size()] == '/' || prefix == "/") &&
      access(prog.c_str(), F_OK) != 0) {
    probe.reach = PreloadReach::kStatic;  // not static, but out of LD_PRELOAD's reach just the same
    probe.why = "stored in the image (the kernel can exec it only from a mount)";
  }
  if (a.fuse == "auto" && FuseWouldDropPrivileges(probe)) {
    std::fprintf(stderr, "fanstore run: %s\n", PrivilegedWithoutImage(probe, prefix).c_str());
    probe.reach = PreloadReach::kReached;  // exec'd as is, below
  }
  const bool unreachable = probe.reach != PreloadReach::kReached;
  if (a.fuse == "always" || (a.fuse == "auto" && unreachable)) {
    FuseRun fr;
    fr.image = abs_image;
    fr.daemon = abs_socket;
    fr.mount = NormalizeAbsolute(a.mount);
    fr.command = command;
    fr.argv0 = argv0;
    fr.why = unreachable ? Unreachable(probe) : a.command[0] + " was given --fuse always";
    return RunUnderFuse(fr);
  }
  if (unreachable)
    return Fail("run",
                Unreachable(probe) + ", so LD_PRELOAD cannot serve " + NormalizeAbsolute(a.mount) +
                    " to it (--fuse never): drop --fuse never to serve it through FUSE, or use `fanstore mount`");

  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(argv0.c_str()));
  for (size_t i = 1; i < command.size(); ++i) argv.push_back(const_cast<char*>(command[i].c_str()));
  argv.push_back(nullptr);
  execvp(command[0].c_str(), argv.data());
  int err = errno;
  Fail("run", "cannot run '" + a.command[0] + "': " + std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

}  // namespace

void AddRunCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "Run a command with the image served under --mount (--image: one node; --daemon: through the node's daemon)");
  sub->add_option("--image", args->image, "image directory (one node: every partition is read locally, no daemon)")
      ->type_name("IMAGE");
  sub->add_option("--daemon", args->daemon,
                  "multi-node: the Unix socket of this node's `fanstore serve`, which names the image; sets "
                  "FANSTORE_DAEMON; {node} expands to this node's name")
      ->type_name("SOCKET");
  sub->add_option("--mount", args->mount, "absolute path the image appears under; it need not exist")
      ->type_name("PREFIX")
      ->capture_default_str();
  sub->add_flag("--stats", args->stats, "FANSTORE_STATS=1: one summary line per process (workers too) at exit");
  sub->add_option("--log", args->log,
                  "debug: FANSTORE_LOG=debug, one stderr line per path call on the image (open, stat, readdir, "
                  "exec...; not the reads of an open file)")
      ->type_name("LEVEL")
      ->default_str("off");
  sub->add_option("--fuse", args->fuse,
                  "auto: a program LD_PRELOAD cannot reach (statically linked, set-user/group-ID, 32-bit, or stored "
                  "in the image itself) gets the image through a FUSE mount at PREFIX in a private mount namespace "
                  "(as root; a user namespace otherwise), except a set-ID program run by a user, which keeps its "
                  "privileges and runs without the image after one line; always: every program does; never: such "
                  "a program is refused with one line")
      ->type_name("MODE")
      ->capture_default_str();
  sub->add_option("--argv0", args->argv0, "argv[0] for the program")->group("");
  sub->add_option("CMD", args->command, "the command and its arguments, after --")->required()->expected(-1);
  sub->callback([args, &exit_code] { exit_code = Run(*args); });
}

}  // namespace fanstore::cli
