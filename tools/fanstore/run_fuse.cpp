// The FUSE half of `fanstore run`: private mount namespace, tools/mount's server in a child, the program in
// another child, signal forwarding, unmount, and the program's exit status.
#include "run_fuse.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "cli_util.hpp"
#include "fanstore/env.hpp"

#ifdef FANSTORE_WITH_FUSE
#include <dirent.h>

#include "fuse_mount.hpp"
#include "fuse_preflight.hpp"
#endif

namespace fanstore::cli {

#ifndef FANSTORE_WITH_FUSE

int RunUnderFuse(const FuseRun& r) {
  return Fail("run", r.why + ", so LD_PRELOAD cannot serve " + r.mount +
                         " to it, and this fanstore was built without FUSE (FANSTORE_FUSE=OFF): "
                         "rebuild with FUSE, or serve the image with `fanstore mount` elsewhere");
}

#else

namespace {

constexpr long kFuseSuperMagic = 0x65735546;

// The loader's variables the interposer kept from us (FANSTORE_LOADER_ENV: `ldd` of a program handed over), set
// again for the program: for it, not for us, they were meant.
void RestoreLoaderEnv() {
  const char* held = ::getenv(env::kLoaderEnv);
  if (held == nullptr) return;
  const std::string all(held);
  ::unsetenv(env::kLoaderEnv);
  for (size_t at = 0, end; at < all.size(); at = end + 1) {
    end = all.find('\n', at);
    if (end == std::string::npos) end = all.size();
    const std::string kv = all.substr(at, end - at);
    if (const size_t eq = kv.find('='); eq != std::string::npos && eq > 0)
      ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
}

// "PROGRAM is statically linked, so LD_PRELOAD cannot serve M to it, and REASON: ADVICE".
int Refuse(const FuseRun& r, const std::string& reason,
           const std::string& advice =
               "mount the image with `fanstore mount --image IMAGE DIR` where you may mount, "
               "and run it there") {
  return Fail("run", r.why + ", so LD_PRELOAD cannot serve " + r.mount + " to it, and " + reason + ": " + advice);
}

bool WriteFile(const char* path, const std::string& text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// A mount namespace of our own whose mounts do not propagate out (slave: the host's still propagate in).
// As root a new mount namespace; otherwise a user namespace that maps only our ids to themselves, which
// gives the capabilities to mount FUSE (Linux >= 4.18) without changing who the program runs as.
std::string EnterNamespace() {
  if (::geteuid() == 0) {
    if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS) failed: ") + strerror(errno);
  } else {
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return std::string("this user may not create a user namespace (") + strerror(errno) + ")";
    if (!WriteFile("/proc/self/setgroups", "deny") ||
        !WriteFile("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
        !WriteFile("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
      return std::string("cannot map ids in the new user namespace: ") + strerror(errno);
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
    return std::string("cannot make the mount namespace private: ") + strerror(errno);
  return {};
}

// mkdir -p, for a mount point the interposer needed no directory for.
std::string MakeMountPoint(const std::string& dir, bool* nonempty) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    for (size_t i = 1; i <= dir.size(); ++i) {
      if (i < dir.size() && dir[i] != '/') continue;
      std::string part = dir.substr(0, i);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
        return "the mount point " + dir + " does not exist and cannot be created (" + part + ": " + strerror(errno) +
               ")";
    }
    *nonempty = false;
    return {};
  }
  if (!S_ISDIR(st.st_mode)) return "the mount prefix " + dir + " is a file, not a directory";
  DIR* d = ::opendir(dir.c_str());
  *nonempty = false;
  if (d != nullptr) {
    while (const dirent* e = ::readdir(d)) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
        *nonempty = true;  // hidden by the mount in our namespace only
        break;
      }
    }
    ::closedir(d);
  }
  return {};
}

bool IsOurMount(const std::string& dir, dev_t before) {
  struct statfs sf;
  struct stat st;
  return ::statfs(dir.c_str(), &sf) == 0 && sf.f_type == kFuseSuperMagic && ::stat(dir.c_str(), &st) == 0 &&
         st.st_dev != before;
}

void SleepMs(long ms) {
  struct timespec ts {
    ms / 1000, (ms % 1000) * 1000000
  };
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

pid_t g_program = -1;
// A signal sent to us (kill, Slurm, mpirun) is passed on; one the kernel sent to the whole foreground
// process group (Ctrl-C, Ctrl-\\, a terminal hang-up) has reached the program already.
void Forward(int sig, siginfo_t* info, void*) {
  if (g_program > 0 && (info == nullptr || info->si_code != SI_KERNEL)) ::kill(g_program, sig);
}
constexpr int kForwarded[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM};

sigset_t ForwardedSet() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kForwarded) sigaddset(&set, sig);
  return set;
}

// Where the program starts: the virtual cwd the interposer handed down, or a real cwd at or below the
// prefix -- the kernel keeps a process's cwd on the directory the mount now covers, so such a cwd must be
// entered again through the mount, or the program would silently read the covered directory. Empty: stay.
std::string StartDirectory(const std::string& mount) {
  if (const char* v = ::getenv(env::kCwd); v != nullptr && *v == '/') return v;
  char buf[PATH_MAX];
  if (::getcwd(buf, sizeof buf) == nullptr) return {};
  std::string cwd = buf;
  const bool below =
      mount == "/" || cwd == mount ||
      (cwd.size() > mount.size() && cwd.compare(0, mount.size(), mount) == 0 && cwd[mount.size()] == '/');
  return below ? cwd : std::string();
}

// Dies of `sig` as the program did, so the caller sees the same wait status -- without a core file of our
// own, which would say nothing about the program and, where core_pattern is a plain name, replace its core.
int DieOf(int sig) {
  struct rlimit none {
    0, 0
  };
  ::setrlimit(RLIMIT_CORE, &none);
  ::prctl(PR_SET_DUMPABLE, 0);
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::kill(::getpid(), sig);
  return 128 + sig;
}

std::string Describe(int status) {
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status));
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

// Waits for pid; true with *status when it ended within `ms` (ms < 0: no limit).
bool WaitFor(pid_t pid, int* status, long ms) {
  for (long waited = 0;; waited += 10) {
    pid_t w = ::waitpid(pid, status, ms < 0 ? 0 : WNOHANG);
    if (w == pid) return true;
    if (w < 0 && errno != EINTR) return false;
    if (ms >= 0 && waited >= ms) return false;
    if (ms >= 0) SleepMs(10);
  }
}

}  // namespace

int RunUnderFuse(const FuseRun& r) {
  // `fanstore mount` needs the same device: pointing there would send the user in a circle.
  if (Status s = mount::CheckFuseDevice("/dev/fuse"); !s.ok())
    return Refuse(r,
                  s.code() == Code::kPermission ? "/dev/fuse is not open to this user"
                                                : "FUSE is not available here (no /dev/fuse)",
                  std::string(s.code() == Code::kPermission
                                  ? "add yourself to the group owning /dev/fuse"
                                  : "ask for it on this node (`modprobe fuse`; in a container, --device /dev/fuse)") +
                      ", or run a build of the program that LD_PRELOAD reaches (dynamically linked, not set-ID)");
  if (std::string e = EnterNamespace(); !e.empty()) return Refuse(r, e);
  bool nonempty = false;
  if (std::string e = MakeMountPoint(r.mount, &nonempty); !e.empty()) return Refuse(r, e);
  struct stat before;
  if (::stat(r.mount.c_str(), &before) != 0) return Refuse(r, "the mount point " + r.mount + " vanished");

  mount::MountOptions mo;
  mo.image = r.image;
  mo.daemon_socket = r.daemon;
  mo.mountpoint = r.mount;
  mo.foreground = true;
  mo.command = "fanstore run";
  if (nonempty) mo.fuse_options.push_back("nonempty");
  const pid_t self = ::getpid();
  const pid_t server = ::fork();
  if (server < 0) return Refuse(r, std::string("fork failed: ") + strerror(errno));
  if (server == 0) {
    // Out of the terminal's process group (a Ctrl-C is the program's to handle, not the server's). The
    // server ends only when we unmount: a signal to the whole job (Slurm, pkill) must not make it unmount
    // cleanly while the program still reads, which would show the program the directory the mount covered
    // (libfuse installs its exit handlers only over SIG_DFL, so ignoring them here keeps them out). If we
    // die, it dies without unmounting: the program's reads then fail (ENOTCONN), never read that directory.
    ::setpgid(0, 0);
    for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGHUP}) ::signal(sig, SIG_IGN);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != self) ::_exit(1);
    Status s = mount::Mount(mo);
    if (!s.ok()) {
      Refuse(r, "the FUSE mount failed: " + s.ToString());
      ::_exit(1);
    }
    ::_exit(0);
  }
  int status = 0;
  for (long waited = 0; !IsOurMount(r.mount, before.st_dev); waited += 10) {
    if (WaitFor(server, &status, 0)) return 1;  // the server said why on stderr
    if (waited > 30000) {
      ::kill(server, SIGKILL);
      WaitFor(server, &status, -1);
      return Refuse(r, "the FUSE server did not come up within 30 s");
    }
    SleepMs(10);
  }

  const std::string start_dir = StartDirectory(r.mount);
  // Signals stay blocked from before the fork until the handler knows the program's pid: none is lost.
  sigset_t forwarded = ForwardedSet(), old_mask;
  ::sigprocmask(SIG_BLOCK, &forwarded, &old_mask);
  const pid_t program = ::fork();
  if (program < 0) {
    int err = errno;
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::umount2(r.mount.c_str(), MNT_DETACH);
    WaitFor(server, &status, 5000);
    return Fail("run", std::string("fork failed: ") + strerror(err));
  }
  if (program == 0) {
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    // We stand for the program (our pid is the one its parent knows): a SIGKILL to us, which we cannot
    // forward, ends it too.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != self) ::_exit(1);
    if (!start_dir.empty() && ::chdir(start_dir.c_str()) != 0) {
      Fail("run", "cannot enter the working directory " + start_dir + " through the mount of the image (" +
                      strerror(errno) + "): start " + r.command[0] + " from a directory the image has, or outside " +
                      r.mount);
      ::_exit(1);
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(r.argv0 ? r.argv0->c_str() : r.command[0].c_str()));
    for (size_t i = 1; i < r.command.size(); ++i) argv.push_back(const_cast<char*>(r.command[i].c_str()));
    argv.push_back(nullptr);
    RestoreLoaderEnv();
    ::execvp(r.command[0].c_str(), argv.data());
    int err = errno;
    Fail("run", "cannot run '" + r.command[0] + "': " + strerror(err));
    ::_exit(err == ENOENT ? 127 : 126);
  }
  g_program = program;
  struct sigaction sa {};
  sa.sa_sigaction = Forward;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);

  // Wait for the program; a server that ends first (killed, crashed) is said at once: the program's reads
  // under the prefix fail from then on.
  bool server_done = false;
  for (;;) {
    pid_t w = ::waitpid(-1, &status, 0);
    if (w == program) break;
    if (w == server && !server_done) {
      server_done = true;
      Fail("run", "the FUSE server of " + r.mount + " ended (" + Describe(status) + ") while " + r.command[0] +
                      " ran: its reads under " + r.mount + " fail from now on");
    } else if (w < 0 && errno != EINTR) {
      status = 0;
      break;
    }
  }
  g_program = -1;
  ::umount2(r.mount.c_str(), MNT_DETACH);
  int server_status = 0;
  if (!server_done && !WaitFor(server, &server_status, 10000)) {
    ::kill(server, SIGKILL);
    WaitFor(server, &server_status, -1);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return DieOf(WTERMSIG(status));
  return 1;
}

#endif  // FANSTORE_WITH_FUSE

}  // namespace fanstore::cli
