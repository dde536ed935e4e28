// Calls on lazy fds (lazy.hpp): reads and seeks served in user space; everything that hands the fd to
// the kernel (mmap, fdopen, sendfile, copy_file_range, splice, ioctl) materializes it first; exec and
// spawn materialize every lazy fd the child could inherit. For other fds each wrapper is one load.
#include <alloca.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <string>

#include "child_env.hpp"
#include "exec_handover.hpp"
#include "exec_path.hpp"
#include "fd_identity.hpp"
#include "fd_table.hpp"
#include "lazy.hpp"
#include "ops.hpp"
#include "raw_syscall.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

inline bool LazyFd(int fd) { return __builtin_expect(lazy::Is(fd), 0); }

// Kernel-facing call on fd: materialize (no-op unless lazy); on failure the call fails with its errno.
inline bool Materialized(int fd) { return !LazyFd(fd) || lazy::Materialize(fd) == 0; }

template <class R>
inline R Fail() {
  return static_cast<R>(-1);
}

}  // namespace

// ---- reads and seeks served in user space ----

FS_WRAPPER(ssize_t, read, (int fd, void* buf, size_t n)) {
  ssize_t r;
  if (LazyFd(fd) && lazy::Read(fd, buf, n, 0, false, &r)) return r;
  return FS_REAL(read, fd, buf, n);
}

FS_WRAPPER(ssize_t, __read_chk, (int fd, void* buf, size_t n, size_t buflen)) {
  if (n > buflen) __chk_fail();
  ssize_t r;
  if (LazyFd(fd) && lazy::Read(fd, buf, n, 0, false, &r)) return r;
  return FS_REAL(__read_chk, fd, buf, n, buflen);
}

FS_WRAPPER(ssize_t, pread, (int fd, void* buf, size_t n, off_t off)) {
  ssize_t r;
  if (LazyFd(fd) && lazy::Read(fd, buf, n, off, true, &r)) return r;
  return FS_REAL(pread, fd, buf, n, off);
}

FS_WRAPPER(ssize_t, pread64, (int fd, void* buf, size_t n, off64_t off)) {
  ssize_t r;
  if (LazyFd(fd) && lazy::Read(fd, buf, n, off, true, &r)) return r;
  return FS_REAL(pread64, fd, buf, n, off);
}

FS_WRAPPER(ssize_t, __pread_chk, (int fd, void* buf, size_t n, off_t off, size_t buflen)) {
  if (n > buflen) __chk_fail();
  ssize_t r;
  if (LazyFd(fd) && lazy::Read(fd, buf, n, off, true, &r)) return r;
  return FS_REAL(__pread_chk, fd, buf, n, off, buflen);
}

FS_WRAPPER(ssize_t, __pread64_chk, (int fd, void* buf, size_t n, off64_t off, size_t buflen)) {
  if (n > buflen) __chk_fail();
  ssize_t r;
  if (LazyFd(fd) && lazy::Read(fd, buf, n, off, true, &r)) return r;
  return FS_REAL(__pread64_chk, fd, buf, n, off, buflen);
}

FS_WRAPPER(ssize_t, readv, (int fd, const struct iovec* iov, int iovcnt)) {
  ssize_t r;
  if (LazyFd(fd) && lazy::ReadV(fd, iov, iovcnt, 0, false, &r)) return r;
  return FS_REAL(readv, fd, iov, iovcnt);
}

FS_WRAPPER(ssize_t, preadv, (int fd, const struct iovec* iov, int iovcnt, off_t off)) {
  ssize_t r;
  if (LazyFd(fd) && lazy::ReadV(fd, iov, iovcnt, off, true, &r)) return r;
  return FS_REAL(preadv, fd, iov, iovcnt, off);
}

FS_WRAPPER(ssize_t, preadv64, (int fd, const struct iovec* iov, int iovcnt, off64_t off)) {
  ssize_t r;
  if (LazyFd(fd) && lazy::ReadV(fd, iov, iovcnt, off, true, &r)) return r;
  return FS_REAL(preadv64, fd, iov, iovcnt, off);
}

namespace {
// preadv2: offset -1 means the file offset; flags the kernel would reject on a regular file are EOPNOTSUPP.
template <class Off, class Real>
ssize_t PreadV2(int fd, const struct iovec* iov, int iovcnt, Off off, int flags, Real real) {
  if (LazyFd(fd)) {
    constexpr int kKnown = RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_NOWAIT | RWF_APPEND;
    if (flags & ~kKnown) {
      if (lazy::Is(fd)) {
        errno = EOPNOTSUPP;
        return -1;
      }
    } else {
      ssize_t r;
      if (lazy::ReadV(fd, iov, iovcnt, off == -1 ? 0 : off, off != -1, &r)) return r;
    }
  }
  return real();
}
}  // namespace

FS_WRAPPER(ssize_t, preadv2, (int fd, const struct iovec* iov, int iovcnt, off_t off, int flags)) {
  return PreadV2(fd, iov, iovcnt, off, flags, [&] { return FS_REAL(preadv2, fd, iov, iovcnt, off, flags); });
}

FS_WRAPPER(ssize_t, preadv64v2, (int fd, const struct iovec* iov, int iovcnt, off64_t off, int flags)) {
  return PreadV2(fd, iov, iovcnt, off, flags, [&] { return FS_REAL(preadv64v2, fd, iov, iovcnt, off, flags); });
}

FS_WRAPPER(off_t, lseek, (int fd, off_t off, int whence)) {
  off_t r;
  if (LazyFd(fd) && lazy::Seek(fd, off, whence, &r)) return r;
  return FS_REAL(lseek, fd, off, whence);
}

FS_WRAPPER(off64_t, lseek64, (int fd, off64_t off, int whence)) {
  off_t r;
  if (LazyFd(fd) && lazy::Seek(fd, off, whence, &r)) return r;
  return FS_REAL(lseek64, fd, off, whence);
}

// Advice and readahead have nothing to do on bytes already in memory.
FS_WRAPPER(ssize_t, readahead, (int fd, off64_t off, size_t count)) {
  if (LazyFd(fd)) return 0;
  return FS_REAL(readahead, fd, off, count);
}

// Nothing to flush on a read-only file (what the kernel answers for a read-only memfd too).
FS_WRAPPER(int, fsync, (int fd)) {
  if (LazyFd(fd)) return 0;
  return FS_REAL(fsync, fd);
}

FS_WRAPPER(int, fdatasync, (int fd)) {
  if (LazyFd(fd)) return 0;
  return FS_REAL(fdatasync, fd);
}

// ---- calls that need the real file: materialize, then libc ----

// lockf is fcntl record locking done inside glibc.
FS_WRAPPER(int, lockf, (int fd, int cmd, off_t len)) {
  if (!Materialized(fd)) return -1;
  return FS_REAL(lockf, fd, cmd, len);
}

FS_WRAPPER(int, lockf64, (int fd, int cmd, off64_t len)) {
  if (!Materialized(fd)) return -1;
  return FS_REAL(lockf64, fd, cmd, len);
}

namespace {
void* AnonymousMmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return reinterpret_cast<void*>(
      RawSyscallErrno(SYS_mmap, reinterpret_cast<long>(addr), static_cast<long>(len), prot, flags, fd, off));
}
}  // namespace

// Anonymous mappings (allocators: the hot case) go straight to the kernel, as glibc's mmap does: no
// lookup, and no dlsym on first use, which could re-enter an allocator that is mmap'ing inside dlsym.
FS_WRAPPER(void*, mmap, (void* addr, size_t len, int prot, int flags, int fd, off_t off)) {
  if (fd < 0 || (flags & MAP_ANONYMOUS)) return AnonymousMmap(addr, len, prot, flags, fd, off);
  if (!Materialized(fd)) return MAP_FAILED;
  return FS_REAL(mmap, addr, len, prot, flags, fd, off);
}

FS_WRAPPER(void*, mmap64, (void* addr, size_t len, int prot, int flags, int fd, off64_t off)) {
  static_assert(sizeof(off64_t) == sizeof(long), "mmap64 is mmap on LP64");
  if (fd < 0 || (flags & MAP_ANONYMOUS)) return AnonymousMmap(addr, len, prot, flags, fd, off);
  if (!Materialized(fd)) return MAP_FAILED;
  return FS_REAL(mmap64, addr, len, prot, flags, fd, off);
}

// glibc's FILE reads the fd with internal calls no wrapper sees.
FS_WRAPPER(FILE*, fdopen, (int fd, const char* mode)) {
  if (!Materialized(fd)) return nullptr;
  return FS_REAL(fdopen, fd, mode);
}

namespace {
// Destination of a user-space sendfile/copy_file_range: fd at its offset, or at *off (pwrite) when given.
struct Sink {
  int fd;
  int64_t* off;
};
ssize_t SinkWrite(void* ctx, const char* p, size_t n) {
  auto* s = static_cast<Sink*>(ctx);
  if (s->off == nullptr) return write(s->fd, p, n);
  ssize_t w = pwrite(s->fd, p, n, static_cast<off_t>(*s->off));
  if (w > 0) *s->off += w;
  return w;
}

// From a lazy fd to a real one the bytes are already in memory: write them (what the kernel would do,
// and it also works across file systems, where copy_file_range from a memfd says EXDEV).
template <class Real>
ssize_t CopyFromLazy(int in, int64_t* in_off, int out, int64_t* out_off, size_t n, Real real) {
  if (LazyFd(in) && !lazy::Is(out)) {
    Sink sink{out, out_off};
    ssize_t r;
    if (lazy::Transfer(in, in_off, n, SinkWrite, &sink, &r)) return r;
  }
  if (!Materialized(in) || !Materialized(out)) return -1;
  return real();
}
}  // namespace

FS_WRAPPER(ssize_t, sendfile, (int out, int in, off_t* off, size_t count)) {
  static_assert(sizeof(off_t) == sizeof(int64_t));
  return CopyFromLazy(in, reinterpret_cast<int64_t*>(off), out, nullptr, count,
                      [&] { return FS_REAL(sendfile, out, in, off, count); });
}

FS_WRAPPER(ssize_t, sendfile64, (int out, int in, off64_t* off, size_t count)) {
  return CopyFromLazy(in, reinterpret_cast<int64_t*>(off), out, nullptr, count,
                      [&] { return FS_REAL(sendfile64, out, in, off, count); });
}

FS_WRAPPER(ssize_t, copy_file_range,
           (int in, off64_t* off_in, int out, off64_t* off_out, size_t len, unsigned int flags)) {
  if (flags != 0 && LazyFd(in)) {
    errno = EINVAL;
    return -1;
  }
  return CopyFromLazy(in, reinterpret_cast<int64_t*>(off_in), out, reinterpret_cast<int64_t*>(off_out), len, [&] {
    ssize_t rc = FS_REAL(copy_file_range, in, off_in, out, off_out, len, flags);
    if (rc >= 0 || errno != EXDEV || !FdTable::IsOurs(FdTable::Raw(in))) return rc;
    // Our memfd to another file system: the kernel refuses (EXDEV); copy one chunk through user space.
    char buf[16384];
    off64_t pos = off_in ? *off_in : FS_REAL(lseek64, in, 0, SEEK_CUR);
    if (pos < 0) return static_cast<ssize_t>(-1);
    ssize_t r = FS_REAL(pread64, in, buf, len < sizeof buf ? len : sizeof buf, pos);
    if (r <= 0) return r;
    ssize_t w =
        off_out ? pwrite64(out, buf, static_cast<size_t>(r), *off_out) : write(out, buf, static_cast<size_t>(r));
    if (w <= 0) return w;
    if (off_in) *off_in += w;
    else FS_REAL(lseek64, in, pos + w, SEEK_SET);
    if (off_out) *off_out += w;
    return w;
  });
}

FS_WRAPPER(ssize_t, splice, (int in, off64_t* off_in, int out, off64_t* off_out, size_t len, unsigned int flags)) {
  if (!Materialized(in) || !Materialized(out)) return -1;
  return FS_REAL(splice, in, off_in, out, off_out, len, flags);
}

// The third argument is an int or a pointer depending on the request; forwarded pointer-sized.
FS_WRAPPER(int, ioctl, (int fd, unsigned long request, ...)) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  if (!Materialized(fd)) return -1;
  return FS_REAL(ioctl, fd, request, arg);
}

// ---- processes: the child must find real files under every fd it inherits ----

// Each exec checks the program first: one the preload cannot reach (static, set-ID, 32-bit) is handed to
// `fanstore run`, which serves it the image through FUSE (exec_handover.hpp).
FS_WRAPPER(int, fexecve, (int fd, char* const argv[], char* const envp_in[])) {
  uint32_t id;
  const bool ours = Active() && FdTable::Lookup(fd, &id);
  if (ours) {
    // The memfd behind it is executable by anyone: the kernel would have checked the entry's own mode.
    int err = Serve(
        [&] {
          if (g_client->image().Get(id).is_dir()) return EACCES;
          return AccessEntry(id, X_OK, true);
        },
        ENOMEM);
    if (err != 0) {
      TraceFd("fexecve", fd, -1, err);
      errno = err;
      return -1;
    }
  }
  if (!Materialized(fd)) return -1;
  lazy::MaterializeAll(true);
  std::string merged;
  char** slots = static_cast<char**>(alloca(ChildEnvSlots(envp_in) * sizeof(char*)));
  char* const* envp = Active() ? ChildEnv(envp_in, nullptr, slots, &merged) : envp_in;
  std::string why;
  if (Active() && handover::NeededForFd(fd, "the program behind fd", &why)) {
    // `fanstore run` reaches the file through the fd, which must survive the exec.
    FS_REAL(fcntl, fd, F_SETFD, 0);
    std::string path = "/dev/fd/" + std::to_string(fd);
    return handover::Exec(path.c_str(), argv, envp, why);
  }
  if (ours) {
    // As execve runs the same entry by its path: an ELF program from its kernel-visible copy, so the loader's
    // $ORIGIN (from /proc/self/exe) is a real directory whose libraries the audit module finds, not a memfd's.
    // A "#!" script, or no copy to be had: the memfd below, as the kernel runs an fd (the interpreter gets
    // /dev/fd/N).
    int err = Serve(
        [&] {
          exec_path::Shebang sb;
          if (std::string copy; exec_path::ReadShebang(fd, &sb) == 0 && exec_path::ExecCopy(id, fd, &copy)) {
            TraceFd("fexecve", fd, 0, 0);
            FS_REAL(execve, copy.c_str(), argv, envp);
            return errno;
          }
          return 0;
        },
        ENOMEM);
    if (err != 0) {
      errno = err;
      return -1;
    }
  }
  return FS_REAL(fexecve, fd, argv, envp);
}

// glibc's execv, execvp and execvpe call an internal execve: they are done on ours instead (exec_path.hpp),
// so a program stored in the image, a PATH entry under the mount and the hand-over work for every launcher.
FS_WRAPPER(int, execv, (const char* path, char* const argv[])) { return execve(path, argv, environ); }

FS_WRAPPER(int, execvp, (const char* file, char* const argv[])) {
  if (!Active()) {
    lazy::MaterializeAll(true);
    return FS_REAL(execvp, file, argv);
  }
  return exec_path::Execvpe(file, argv, environ);
}

FS_WRAPPER(int, execvpe, (const char* file, char* const argv[], char* const envp[])) {
  if (!Active()) {
    lazy::MaterializeAll(true);
    return FS_REAL(execvpe, file, argv, envp);
  }
  return exec_path::Execvpe(file, argv, envp);
}

// execl, execlp, execle: the argument list as an argv array on the caller's stack, as glibc builds it (exec
// must not allocate: it is async-signal-safe), then our execv/execvp/execve.
namespace {
// Entries argv needs for arg0 and the arguments after it, up to their terminating NULL (included).
size_t ArgvSlots(const char* arg0, va_list* ap) {
  size_t n = 1;
  if (arg0 != nullptr) {
    va_list count;
    va_copy(count, *ap);
    while (va_arg(count, char*) != nullptr) ++n;
    va_end(count);
  }
  return n + 1;
}
// Fills argv (ArgvSlots entries) from arg0 and *ap; *ap is left after the terminating NULL (execle's envp).
char** FillArgv(char** argv, const char* arg0, va_list* ap) {
  size_t i = 0;
  argv[i++] = const_cast<char*>(arg0);
  if (arg0 != nullptr)
    while ((argv[i++] = va_arg(*ap, char*)) != nullptr) {
    }
  return argv;
}
}  // namespace

FS_WRAPPER(int, execl, (const char* path, const char* arg, ...)) {
  va_list ap;
  va_start(ap, arg);
  char** argv = FillArgv(static_cast<char**>(alloca(ArgvSlots(arg, &ap) * sizeof(char*))), arg, &ap);
  va_end(ap);
  return execv(path, argv);
}

FS_WRAPPER(int, execlp, (const char* file, const char* arg, ...)) {
  va_list ap;
  va_start(ap, arg);
  char** argv = FillArgv(static_cast<char**>(alloca(ArgvSlots(arg, &ap) * sizeof(char*))), arg, &ap);
  va_end(ap);
  return execvp(file, argv);
}

FS_WRAPPER(int, execle, (const char* path, const char* arg, ...)) {
  va_list ap;
  va_start(ap, arg);
  char** argv = FillArgv(static_cast<char**>(alloca(ArgvSlots(arg, &ap) * sizeof(char*))), arg, &ap);
  char** envp = va_arg(ap, char**);
  va_end(ap);
  return execve(path, argv, envp);
}

// posix_spawn's file actions may dup2 any fd (close-on-exec or not) into the child: materialize all.
FS_WRAPPER(int, posix_spawn,
           (pid_t * pid, const char* path, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* attr,
            char* const argv[], char* const envp_in[])) {
  lazy::MaterializeAll(false);
  std::string merged;
  char** slots = static_cast<char**>(alloca(ChildEnvSlots(envp_in) * sizeof(char*)));
  char* const* envp = Active() ? ChildEnv(envp_in, nullptr, slots, &merged) : envp_in;
  int rc;
  if (exec_path::Spawn(pid, path, false, fa, attr, argv, envp, &rc)) return rc;  // a program of the image
  std::string why;
  if (Active() && handover::Needed(path, false, &why)) return handover::Spawn(pid, path, fa, attr, argv, envp, why);
  return FS_REAL(posix_spawn, pid, path, fa, attr, argv, envp);
}

FS_WRAPPER(int, posix_spawnp,
           (pid_t * pid, const char* file, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* attr,
            char* const argv[], char* const envp_in[])) {
  lazy::MaterializeAll(false);
  std::string merged;
  char** slots = static_cast<char**>(alloca(ChildEnvSlots(envp_in) * sizeof(char*)));
  char* const* envp = Active() ? ChildEnv(envp_in, nullptr, slots, &merged) : envp_in;
  int rc;
  if (exec_path::Spawn(pid, file, true, fa, attr, argv, envp, &rc)) return rc;  // found in the image
  std::string why;
  if (Active() && handover::Needed(file, true, &why)) return handover::Spawn(pid, file, fa, attr, argv, envp, why);
  return FS_REAL(posix_spawnp, pid, file, fa, attr, argv, envp);
}

// system and popen spawn a shell with glibc-internal calls; the shell inherits every fd without FD_CLOEXEC.
FS_WRAPPER(int, system, (const char* cmd)) {
  lazy::MaterializeAll(true);
  return FS_REAL(system, cmd);
}

FS_WRAPPER(FILE*, popen, (const char* cmd, const char* mode)) {
  lazy::MaterializeAll(true);
  FILE* f = FS_REAL(popen, cmd, mode);
  if (f != nullptr) fd_identity::Reused(fileno(f));  // the pipe's number is new
  return f;
}
