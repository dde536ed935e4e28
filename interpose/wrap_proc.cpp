// fd lifetime (close, close_range, closefrom, dup*, fcntl) and processes (fork, vfork, execve).
#include <alloca.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

#include "child_env.hpp"
#include "cwd.hpp"
#include "exec_handover.hpp"
#include "exec_path.hpp"
#include "fanstore/env.hpp"
#include "fd_table.hpp"
#include "lazy.hpp"
#include "ops.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;
namespace env = fanstore::env;

namespace {

// Closes [first, last] except the Client's internal fds, which the program never opened and must not
// take away from us (Python's subprocess and daemons call closefrom/close_range(3, ~0U)).
int CloseRangeSparing(unsigned first, unsigned last, int flags) {
  unsigned hw = static_cast<unsigned>(FdTable::HighWater());
  unsigned lo = first;
  for (unsigned fd = first; fd < hw && fd <= last; ++fd) {
    uint32_t raw = FdTable::Raw(static_cast<int>(fd));
    if (raw == FdTable::kInternal) {
      if (fd > lo && FS_REAL(close_range, lo, fd - 1, flags) != 0) return -1;
      lo = fd + 1;
    } else if (raw != 0 && !(flags & CLOSE_RANGE_CLOEXEC)) {
      FdTable::Clear(static_cast<int>(fd));
      lazy::Forget(static_cast<int>(fd));
    }
  }
  if (lo > last) return 0;
  return FS_REAL(close_range, lo, last, flags);
}

// After a successful dup of `from` onto `to`: `to` takes `from`'s status, whatever `to` was before
// (the program owns fd numbers, so dup2 over one of our internal fds replaces it; the Client detects
// that by the fd's inode). A copy the program makes of an internal fd is the program's, not ours.
void TrackDup(int from, int to) {
  if (!t_inside && FdTable::Raw(to) == FdTable::kInternal) lazy::PlaceholderLost(to);
  if (!t_inside && FdTable::Raw(from) == FdTable::kInternal) {
    FdTable::Clear(to);
    lazy::Forget(to);
    return;
  }
  FdTable::Copy(from, to);
  lazy::CopyOnDup(from, to);  // `to` shares the lazy state (offset, flags) of `from`, or stops being lazy
}

// A dup that lands on stdin/stdout/stderr is usually for stdio or a child, which reach the kernel with
// glibc-internal calls no wrapper sees: make it real (with every fd sharing its state). If that fails
// the fd stays lazy: our wrappers still serve it, and the kernel still refuses it (never wrong bytes).
inline void AfterDupOnto(int nfd) {
  if (nfd >= 0 && nfd <= 2 && lazy::Is(nfd)) lazy::Materialize(nfd);
}

// fcntl on a lazy fd: F_GETFL/F_SETFL answered from its state; fd-level commands (FD_CLOEXEC, dups)
// work on the placeholder; anything else (locks, leases, seals, ...) needs the real file.
// True when answered (*rc set); false: call libc (after materializing when needed).
bool LazyFcntl(int fd, int cmd, void* arg, int* rc) {
  if (__builtin_expect(!lazy::Is(fd), 1)) return false;
  switch (cmd) {
    case F_GETFD:
    case F_SETFD: return false;
    case F_DUPFD:
    case F_DUPFD_CLOEXEC: return false;
    case F_GETFL:
      if (lazy::GetFl(fd, rc)) return true;
      return false;
    case F_SETFL:
      if (lazy::SetFl(fd, static_cast<int>(reinterpret_cast<intptr_t>(arg)), rc)) return true;
      break;
    default: break;
  }
  if (lazy::Materialize(fd) != 0) {
    *rc = -1;
    return true;
  }
  return false;
}

}  // namespace

FS_WRAPPER(int, close, (int fd)) {
  uint32_t raw = FdTable::Raw(fd);
  if (raw == 0) return FS_REAL(close, fd);
  if (raw == FdTable::kInternal && !t_inside) {
    // The program closing an fd it never opened (a "close everything" loop): leave ours alone.
    errno = EBADF;
    return -1;
  }
  FdTable::Clear(fd);  // before the kernel can hand the number to another thread's open
  lazy::Forget(fd);
  int rc = FS_REAL(close, fd);
  if (g_log_debug && FdTable::IsOurs(raw)) TraceFd("close", fd, rc, errno);
  return rc;
}

FS_WRAPPER(int, close_range, (unsigned int first, unsigned int last, int flags)) {
  if (FdTable::HighWater() == 0 || t_inside || (flags & CLOSE_RANGE_CLOEXEC))
    return FS_REAL(close_range, first, last, flags);
  if (first > last) {
    errno = EINVAL;
    return -1;
  }
  return CloseRangeSparing(first, last, flags);
}

FS_WRAPPER(void, closefrom, (int lowfd)) {
  if (FdTable::HighWater() == 0 || t_inside || lowfd < 0) return FS_REAL(closefrom, lowfd);
  int saved = errno;
  if (CloseRangeSparing(static_cast<unsigned>(lowfd), ~0U, 0) != 0) {
    // Kernels without close_range: fall back to closing the tracked range one by one, then libc's.
    unsigned hw = static_cast<unsigned>(FdTable::HighWater());
    for (unsigned fd = static_cast<unsigned>(lowfd); fd < hw; ++fd)
      if (FdTable::Raw(static_cast<int>(fd)) != FdTable::kInternal) close(static_cast<int>(fd));
    if (hw > static_cast<unsigned>(lowfd)) FS_REAL(closefrom, static_cast<int>(hw));
  }
  errno = saved;
}

namespace {
// A dup of fd (lazy or not) by `real`; tracking follows. A lazy `nfd` being replaced stops being lazy
// before the syscall, so a concurrent materialization of its old state cannot dup3 over the new file.
template <class Real>
int DupCommon(int fd, int nfd_hint, Real real) {
  // (Only when the dup can succeed: a failed dup2 must leave nfd as it was.)
  if (nfd_hint >= 0 && nfd_hint != fd && lazy::Is(nfd_hint) && FS_REAL(fcntl, fd, F_GETFD) >= 0) lazy::Forget(nfd_hint);
  int rc;
  if (lazy::Is(fd)) {
    auto fn = [](void* ctx) { return (*static_cast<Real*>(ctx))(); };
    if (lazy::Dup(fd, fn, &real, &rc)) {
      if (rc >= 0 && rc != fd) {
        if (FdTable::Raw(rc) == FdTable::kInternal) lazy::PlaceholderLost(rc);
        FdTable::Copy(fd, rc);
        AfterDupOnto(rc);
      }
      return rc;
    }
  }
  rc = real();
  if (rc >= 0 && rc != fd) {
    TrackDup(fd, rc);  // also replaces whatever rc was (kInternal included)
    AfterDupOnto(rc);
  }
  return rc;
}
}  // namespace

FS_WRAPPER(int, dup, (int fd)) {
  return DupCommon(fd, -1, [&] { return FS_REAL(dup, fd); });
}

FS_WRAPPER(int, dup2, (int fd, int nfd)) {
  return DupCommon(fd, nfd, [&] { return FS_REAL(dup2, fd, nfd); });
}

FS_WRAPPER(int, dup3, (int fd, int nfd, int flags)) {
  return DupCommon(fd, nfd, [&] { return FS_REAL(dup3, fd, nfd, flags); });
}

// The third argument is an int or a pointer depending on cmd; both travel in one register on x86-64,
// so it is forwarded as a pointer-sized value (what glibc itself does).
namespace {
// fcntl and fcntl64: lazy fds answer in user space; F_DUPFD* copies our tracking; the rest is libc's.
template <class Real>
int FcntlCommon(int fd, int cmd, void* arg, Real real) {
  int lrc;
  if (LazyFcntl(fd, cmd, arg, &lrc)) return lrc;
  if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) return DupCommon(fd, -1, real);
  return real();
}
}  // namespace

FS_WRAPPER(int, fcntl, (int fd, int cmd, ...)) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return FcntlCommon(fd, cmd, arg, [&] { return FS_REAL(fcntl, fd, cmd, arg); });
}

FS_WRAPPER(int, fcntl64, (int fd, int cmd, ...)) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return FcntlCommon(fd, cmd, arg, [&] { return FS_REAL(fcntl64, fd, cmd, arg); });
}

// fork needs nothing beyond libc's: the pthread_atfork handlers registered at start-up materialize the
// lazy fds (parent and child must share their offsets) and release our locks and the Client's in the
// child. Wrapped so the exported list names it explicitly.
FS_WRAPPER(pid_t, fork, ()) { return FS_REAL(fork); }

// Forked workers (PyTorch DataLoader, multiprocessing) leave through _exit, which skips atexit: print
// their stats line here so FANSTORE_STATS=1 shows the workers' reads, not only the parent's.
FS_WRAPPER(void, _exit, (int status)) {
  PrintStatsBeforeExit();
  FS_REAL(_exit, status);
  __builtin_unreachable();
}

// vfork is a real fork here. A vfork child shares the parent's memory and stack until it execs, so it
// must not allocate, lock or even return from the function that called vfork -- and our wrapper is
// such a function: calling the real vfork from it and returning would corrupt the parent's stack.
// Any wrapper the child then enters (execve building FANSTORE_CWD, open on the image) would allocate.
// A real fork is always correct for programs that use vfork correctly; it only costs a page-table copy.
FS_WRAPPER(pid_t, vfork, ()) { return FS_REAL(fork); }

// execve hands the virtual cwd to the child (FANSTORE_CWD); a program inside the image is executed from a copy
// with a real path (ExecCopy), else from its memfd (fexecve), since the kernel cannot see the path; a "#!" script
// inside the image, or a real one whose interpreter is inside it, is run as the kernel runs scripts
// (exec_path::ExecScript).
FS_WRAPPER(int, execve, (const char* path, char* const argv[], char* const envp[])) {
  lazy::MaterializeAll(true);  // the new program must find real files under the fds it inherits
  if (!Active()) return FS_REAL(execve, path, argv, envp);
  Resolved r = SafeClassify(AT_FDCWD, path);
  std::string v;
  std::string cwd_kv, merged;  // allocated only with a virtual cwd, or to merge a program's own LD_PRELOAD
  if (cwd::HasVirtual() && Serve([&] { return cwd::Virtual(&v); }, false)) cwd_kv = std::string(env::kCwd) + "=" + v;
  char** slots = static_cast<char**>(alloca(ChildEnvSlots(envp) * sizeof(char*)));
  char* const* use_env = ChildEnv(envp, cwd_kv.empty() ? nullptr : cwd_kv.c_str(), slots, &merged);
  std::string why;
  exec_path::Shebang sb;
  if (r.pass()) {
    if (exec_path::RealScriptWithImageInterpreter(r.PassPath(path), &sb))
      return exec_path::ExecScript(sb, path, argv, use_env);
    // A static (or set-ID, 32-bit) program would not see the image: `fanstore run` hands it a FUSE mount.
    if (handover::Needed(r.PassPath(path), false, &why)) return handover::Exec(r.PassPath(path), argv, use_env, why);
    return FS_REAL(execve, r.PassPath(path), argv, use_env);
  }
  int saved = errno;
  std::string image_path;
  int err = Serve(
      [&] {
        LookUp(&r);
        if (r.kind == Resolved::kFail) return r.err;
        if (g_client->image().Get(r.id).is_dir()) return EACCES;
        // The memfd itself is executable by anyone: apply the packed mode bits as the kernel would.
        if (int e = AccessEntry(r.id, X_OK, true); e != 0) return e;
        int fd = OpenEntry(r.id, O_RDONLY | O_CLOEXEC);  // an ELF program needs no fd once it runs
        if (fd < 0) return errno;
        image_path = AbsoluteOf(r.rel);
        int script = exec_path::ReadShebang(fd, &sb);
        if (script != 0 || handover::NeededForFd(fd, image_path.c_str(), &why)) {
          FdTable::Clear(fd);
          FS_REAL(close, fd);
          if (script != 0) return script < 0 ? ENOEXEC : -2;  // -2: its interpreter runs it (below)
          return -1;                                          // run it from the FUSE mount instead (below)
        }
        TraceCall("execve", path, 0, 0);
        if (std::string copy; exec_path::ExecCopy(r.id, fd, &copy)) {
          FdTable::Clear(fd);
          FS_REAL(close, fd);
          FS_REAL(execve, copy.c_str(), argv, use_env);
          return errno;
        }
        fexecve(fd, argv, use_env);
        int e = errno;
        FdTable::Clear(fd);
        FS_REAL(close, fd);
        return e;
      },
      ENOMEM);
  if (err == -1) return handover::Exec(image_path.c_str(), argv, use_env, why);
  if (err == -2) return exec_path::ExecScript(sb, path, argv, use_env);
  TraceCall("execve", path, -1, err);
  errno = err ? err : saved;
  return -1;
}
