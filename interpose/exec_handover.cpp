// Handing programs the preload cannot reach over to `fanstore run --fuse always`: the probe, the new command
// line and the exec or spawn of the fanstore binary.
#include "exec_handover.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <string_view>
#include <vector>

#include "fanstore/env.hpp"
#include "fanstore/program_probe.hpp"
#include "real.hpp"
#include "state.hpp"
#include "trace.hpp"

namespace fanstore::interpose::handover {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;

// Inside `fanstore run --fuse always` (or any FUSE mount at the prefix) the kernel serves the prefix to
// every program: nothing to hand over.
bool FuseServesMount() {
  struct statfs sf;
  return FS_REAL(statfs, g_mount, &sf) == 0 && sf.f_type == kFuseSuperMagic;
}

std::string Why(const ProgramProbe& p) {
  if (p.reach == PreloadReach::kSecure) return p.program + " runs with " + p.why + " (the loader ignores LD_PRELOAD)";
  return p.program + " is " + p.why;
}

// `fanstore run` arguments for the program: the image (or daemon) and mount of this process.
struct CommandLine {
  std::vector<std::string> words;
  std::vector<char*> argv;
  bool ok = false;
};

CommandLine Build(const char* path, char* const argv[]) {
  CommandLine c;
  const char* binary = getenv(env::kRunBinary);
  const char* daemon = getenv(env::kDaemon);
  if (binary == nullptr || *binary != '/' || g_client == nullptr) return c;
  c.words = {binary, "run", "--fuse", "always", "--mount", std::string(g_mount, g_mount_len)};
  if (daemon != nullptr && *daemon != '\0') {
    c.words.insert(c.words.end(), {"--daemon", daemon});
  } else {
    c.words.insert(c.words.end(), {"--image", g_client->image().dir()});
  }
  // (CLI11 takes the next word as the value, even an empty one or one that looks like an option: "-sh".)
  if (argv != nullptr && argv[0] != nullptr) c.words.insert(c.words.end(), {"--argv0", argv[0]});
  c.words.insert(c.words.end(), {"--", path});
  for (size_t i = 1; argv != nullptr && argv[0] != nullptr && argv[i] != nullptr; ++i) c.words.emplace_back(argv[i]);
  for (auto& w : c.words) c.argv.push_back(w.data());
  c.argv.push_back(nullptr);
  c.ok = true;
  return c;
}

void SayImpossible(const std::string& why) {
  WriteLine("fanstore: ", why, ", so LD_PRELOAD cannot serve ", std::string_view(g_mount, g_mount_len),
            " to it: start the job with `fanstore run` (it hands such programs a FUSE mount) or use `fanstore mount`");
}

// The usual exec -- a dynamically linked program of this machine's class, without set-ID bits or file
// capabilities, or a file we cannot open (the exec reports what is wrong, as ProbeProgram leaves it) --
// recognised with a few syscalls and no allocation: exec from a forked child (of a multithreaded program, or
// a crash handler) must stay async-signal-safe. Anything else: the full probe.
bool PlainDynamicProgram(const char* path) {
  int fd = FS_REAL(open, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  struct stat st;
  char head[2];
  bool plain = FS_REAL(fstat, fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & (S_ISUID | S_ISGID)) == 0 &&
               (::getuid() == 0 || FS_REAL(fgetxattr, fd, "security.capability", nullptr, 0) < 0) &&
               FS_REAL(pread, fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head) &&
               !(head[0] == '#' && head[1] == '!') && ProbeElfFd(fd) == PreloadReach::kReached;
  FS_REAL(close, fd);
  return plain;
}

}  // namespace

bool Needed(const char* path, bool search_path, std::string* why) {
  if (path == nullptr || !Ready()) return false;
  ReentrancyGuard guard;
  const int saved = errno;
  const bool plain = (!search_path || strchr(path, '/') != nullptr) && PlainDynamicProgram(path);
  errno = saved;
  if (plain) return false;
  try {
    // execve resolves a name without '/' against the cwd, execvp through PATH.
    std::string p = (search_path || strchr(path, '/') != nullptr) ? std::string(path) : "./" + std::string(path);
    ProgramProbe probe = ProbeProgram(p);
    if (probe.reach == PreloadReach::kReached || FuseServesMount()) return false;
    if (FuseWouldDropPrivileges(probe)) {
      WriteLine("fanstore: ", PrivilegedWithoutImage(probe, std::string(g_mount, g_mount_len)));
      return false;
    }
    *why = Why(probe);
    return true;
  } catch (...) {
    return false;
  }
}

bool NeededForFd(int fd, const char* shown_as, std::string* why) {
  if (!Ready()) return false;
  ReentrancyGuard guard;
  try {
    std::string w;
    PreloadReach reach = ProbeElfFd(fd, &w);
    if (reach == PreloadReach::kReached || FuseServesMount()) return false;
    *why = std::string(shown_as) + " is " + w;
    return true;
  } catch (...) {
    return false;
  }
}

namespace {

// The loader's variables (LD_TRACE_LOADED_OBJECTS for ldd, LD_DEBUG, ...) would act on `fanstore run` itself, which
// would then list or trace its own libraries: they travel in FANSTORE_LOADER_ENV, which it sets again for the
// program it starts. LD_PRELOAD, LD_AUDIT and LD_LIBRARY_PATH stay: they are meant for every process.
std::vector<char*> SupervisorEnv(char* const envp[], std::string* held) {
  std::vector<char*> out;
  for (size_t i = 0; envp && envp[i]; ++i) {
    const std::string_view kv(envp[i]), name = kv.substr(0, kv.find('='));
    if (name.substr(0, 3) == "LD_" && name != "LD_PRELOAD" && name != "LD_AUDIT" && name != "LD_LIBRARY_PATH") {
      held->append(kv).push_back('\n');
      continue;
    }
    if (name != env::kLoaderEnv) out.push_back(envp[i]);
  }
  if (!held->empty()) {
    held->insert(0, std::string(env::kLoaderEnv) + "=");
    out.push_back(held->data());
  }
  out.push_back(nullptr);
  return out;
}

}  // namespace

int Exec(const char* path, char* const argv[], char* const envp[], const std::string& why) {
  CommandLine c;
  std::string held;
  std::vector<char*> env2;
  {
    ReentrancyGuard guard;
    try {
      c = Build(path, argv);
      env2 = SupervisorEnv(envp, &held);
    } catch (...) {
      errno = ENOMEM;
      return -1;
    }
  }
  if (!c.ok) {
    SayImpossible(why);
    errno = EACCES;
    return -1;
  }
  FS_REAL(execve, c.argv[0], c.argv.data(), env2.data());
  int err = errno;
  WriteLine("fanstore: cannot start ", c.words[0], " for ", why, ": ", strerror(err));
  errno = err;
  return -1;
}

int Spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* attr,
          char* const argv[], char* const envp[], const std::string& why) {
  CommandLine c;
  std::string held;
  std::vector<char*> env2;
  {
    ReentrancyGuard guard;
    try {
      c = Build(path, argv);
      env2 = SupervisorEnv(envp, &held);
    } catch (...) {
      return ENOMEM;
    }
  }
  if (!c.ok) {
    SayImpossible(why);
    return EACCES;
  }
  return FS_REAL(posix_spawn, pid, c.argv[0], fa, attr, c.argv.data(), env2.data());
}

}  // namespace fanstore::interpose::handover
