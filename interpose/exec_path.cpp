// execvp's PATH search on our execve, and posix_spawn[p] of programs stored in the image (exec_path.hpp).
#include "exec_path.hpp"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "cwd.hpp"
#include "exec_handover.hpp"
#include "fd_table.hpp"
#include "ops.hpp"
#include "wrap.hpp"

namespace fanstore::interpose::exec_path {
namespace {

constexpr const char* kDefaultPath = "/bin:/usr/bin";  // glibc's confstr(_CS_PATH)

// glibc's maybe_script_execute: a file the kernel would not run (no "#!") is run by /bin/sh.
void ScriptExecute(const char* file, char* const argv[], char* const envp[]) {
  std::vector<char*> args;
  try {
    args.push_back(const_cast<char*>("/bin/sh"));
    args.push_back(const_cast<char*>(file));
    for (size_t i = 1; argv != nullptr && argv[0] != nullptr && argv[i] != nullptr; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
  } catch (...) {
    errno = ENOMEM;
    return;
  }
  execve(args[0], args.data(), envp);
}

// Calls f(candidate) for each PATH entry joined with `file` (an empty entry is the cwd) until it returns
// true; false when none did.
template <class F>
bool ForEachCandidate(const char* file, F&& f) {
  const char* path = getenv("PATH");
  if (path == nullptr) path = kDefaultPath;
  const size_t file_len = strlen(file);
  char buf[PATH_MAX];
  for (const char* p = path;; ) {
    const char* end = strchrnul(p, ':');
    const size_t dir_len = static_cast<size_t>(end - p);
    if (dir_len + 1 + file_len < sizeof buf) {  // glibc skips entries too long for a path
      memcpy(buf, p, dir_len);
      size_t n = dir_len;
      if (n > 0) buf[n++] = '/';
      memcpy(buf + n, file, file_len + 1);
      if (f(static_cast<const char*>(buf))) return true;
    }
    if (*end == '\0') return false;
    p = end + 1;
  }
}

// Could a PATH search reach the image: some entry under the mount (or relative, with a virtual cwd or a
// real one near the mount)? Cheap for the usual PATH: one prefix compare per entry.
bool SearchReachesImage() {
  const char* path = getenv("PATH");
  if (path == nullptr) path = kDefaultPath;
  char dir[PATH_MAX];
  for (const char* p = path;; ) {
    const char* end = strchrnul(p, ':');
    const size_t n = static_cast<size_t>(end - p);
    if (n == 0 || p[0] != '/') {
      if (cwd::HasVirtual() || cwd::RealCwdNearMount()) return true;
    } else if (n < sizeof dir) {
      memcpy(dir, p, n);
      dir[n] = '\0';
      if (!SafeClassify(AT_FDCWD, dir).pass()) return true;
    }
    if (*end == '\0') return false;
    p = end + 1;
  }
}

// posix_spawn of image entry `r` (looked up): from a memfd of its bytes. An ELF program is exec'd by the
// path /proc/<our pid>/fd/N, which the child resolves in our fd table, so its file actions (dup2 onto N,
// closefrom) cannot touch it and the fd can stay close-on-exec; a "#!" script needs a path its interpreter
// can open after the exec, /dev/fd/N of an inherited fd (what fexecve gives it too).
int SpawnEntry(pid_t* pid, const Resolved& r, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* attr,
               char* const argv[], char* const envp[]) {
  std::string why, image_path, exec_path;
  int fd = -1;
  int err = Serve(
      [&]() -> int {
        if (g_client->image().Get(r.id).is_dir()) return EACCES;
        if (int e = AccessEntry(r.id, X_OK, true); e != 0) return e;
        fd = OpenEntry(r.id, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return errno;
        image_path = AbsoluteOf(r.rel);
        if (handover::NeededForFd(fd, image_path.c_str(), &why)) return -1;
        char head[2] = {0, 0};
        const bool script = FS_REAL(pread, fd, head, 2, 0) == 2 && head[0] == '#' && head[1] == '!';
        if (script) {
          FS_REAL(fcntl, fd, F_SETFD, 0);
          exec_path = "/dev/fd/" + std::to_string(fd);
        } else {
          exec_path = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
        }
        return 0;
      },
      ENOMEM);
  int rc = err;
  if (err == -1) {
    rc = handover::Spawn(pid, image_path.c_str(), fa, attr, argv, envp, why);  // a static program: FUSE
  } else if (err == 0) {
    TraceCall("posix_spawn", image_path.c_str(), 0, 0);
    rc = FS_REAL(posix_spawn, pid, exec_path.c_str(), fa, attr, argv, envp);
  }
  if (fd >= 0) {
    FdTable::Clear(fd);
    FS_REAL(close, fd);
  }
  return rc;
}

}  // namespace

int Execvpe(const char* file, char* const argv[], char* const envp[]) {
  if (file == nullptr || *file == '\0') {
    errno = ENOENT;
    return -1;
  }
  if (strchr(file, '/') != nullptr) {
    execve(file, argv, envp);
    if (errno == ENOEXEC) ScriptExecute(file, argv, envp);
    return -1;
  }
  if (strnlen(file, NAME_MAX + 1) > NAME_MAX) {
    errno = ENAMETOOLONG;
    return -1;
  }
  bool eacces = false;
  int last = ENOENT;
  bool stop = ForEachCandidate(file, [&](const char* cand) {
    execve(cand, argv, envp);
    if (errno == ENOEXEC) ScriptExecute(cand, argv, envp);
    last = errno;
    switch (errno) {
      case EACCES:
        eacces = true;
        return false;
      case ENOENT:
      case ESTALE:
      case ENOTDIR:
      case ENODEV:
      case ETIMEDOUT:
        return false;
      default:
        return true;  // a real error: execvp reports it without trying further
    }
  });
  errno = (!stop && eacces) ? EACCES : last;
  return -1;
}

bool Spawn(pid_t* pid, const char* file, bool search, const posix_spawn_file_actions_t* fa,
           const posix_spawnattr_t* attr, char* const argv[], char* const envp[], int* rc) {
  if (file == nullptr || !Active()) return false;
  if (!search || strchr(file, '/') != nullptr) {
    Resolved r = SafeClassify(AT_FDCWD, file);
    if (r.pass()) return false;
    Serve(
        [&] {
          LookUp(&r);
          return 0;
        },
        0);
    *rc = r.kind == Resolved::kFail ? r.err : SpawnEntry(pid, r, fa, attr, argv, envp);
    return true;
  }
  if (!SearchReachesImage()) return false;
  // posix_spawnp's search, done here: the first candidate that is an executable regular file, in the image
  // or on disk (a real one is spawned by its path, so a directory the mount covers is never searched).
  bool found = ForEachCandidate(file, [&](const char* cand) {
    Resolved r = SafeClassify(AT_FDCWD, cand);
    if (r.pass()) {
      const char* real = r.PassPath(cand);
      struct stat st;
      if (FS_REAL(stat, real, &st) != 0 || !S_ISREG(st.st_mode) || FS_REAL(access, real, X_OK) != 0) return false;
      std::string why;
      *rc = handover::Needed(real, false, &why) ? handover::Spawn(pid, real, fa, attr, argv, envp, why)
                                                 : FS_REAL(posix_spawn, pid, real, fa, attr, argv, envp);
      return true;
    }
    bool runnable = Serve(
        [&] {
          LookUp(&r);
          return r.kind == Resolved::kOurs && g_client->image().Get(r.id).is_reg() && AccessEntry(r.id, X_OK, true) == 0;
        },
        false);
    if (!runnable) return false;
    *rc = SpawnEntry(pid, r, fa, attr, argv, envp);
    return true;
  });
  if (!found) *rc = ENOENT;
  return true;
}

}  // namespace fanstore::interpose::exec_path
