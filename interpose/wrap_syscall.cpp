// syscall(2): programs call it for what glibc had no wrapper for when they were written (close_range,
// openat2, io_uring_setup, io_setup...). Calls that touch fds or paths go through the same wrappers as
// their libc names; fd-creating ones forget stale tracking of the number; the rest go straight to the kernel.
#include <dirent.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "async_io.hpp"
#include "fd_identity.hpp"
#include "lazy.hpp"
#include "raw_syscall.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

// A raw call that returns a new fd (or fills an array of two): the number is the program's now.
long FreshFd(long r) {
  if (r >= 0) fd_identity::Reused(static_cast<int>(r));
  return r;
}
long FreshPair(long r, long fds) {
  if (r == 0 && fds != 0) {
    const int* p = reinterpret_cast<const int*>(fds);
    fd_identity::Reused(p[0]);
    fd_identity::Reused(p[1]);
  }
  return r;
}

long IoSubmit(long ctx, long nr, long iocbs) {
  async_io::Enter();
  auto** ios = reinterpret_cast<struct iocb**>(iocbs);
  long ok = nr;
  if (nr > 0 && ios != nullptr && lazy::Any()) {
    for (long i = 0; i < nr; ++i) {
      if (ios[i] != nullptr && async_io::BeforeSubmit(static_cast<int>(ios[i]->aio_fildes)) != 0) {
        ok = i;
        break;
      }
    }
    if (ok == 0) return -1;  // errno from the materialization
  }
  return RawSyscallErrno(SYS_io_submit, ctx, ok, iocbs);
}

// openat2 under the mount is an openat with how->flags and how->mode (RESOLVE_* flags have nothing to
// refuse in an image without symlinks or mounts); elsewhere it is the kernel's.
long Openat2(long dirfd, long path, long how, long size) {
  const auto* h = reinterpret_cast<const struct open_how*>(how);
  const char* p = reinterpret_cast<const char*>(path);
  if (Active() && h != nullptr && p != nullptr && static_cast<size_t>(size) >= sizeof(struct open_how) &&
      !SafeClassify(static_cast<int>(dirfd), p).pass())
    return openat(static_cast<int>(dirfd), p, static_cast<int>(h->flags), static_cast<mode_t>(h->mode));
  return FreshFd(RawSyscallErrno(SYS_openat2, dirfd, path, how, size));
}

}  // namespace

FS_WRAPPER(long, syscall, (long n, ...)) {
  va_list ap;
  va_start(ap, n);
  // As glibc's syscall(): six argument registers, whatever the call uses.
  long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
  long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
  va_end(ap);
  const int fd = static_cast<int>(a1);
  const char* path1 = reinterpret_cast<const char*>(a1);
  const char* path2 = reinterpret_cast<const char*>(a2);
  switch (n) {
    // fds and paths: the libc names' wrappers
    case SYS_open: return open(path1, static_cast<int>(a2), static_cast<mode_t>(a3));
    case SYS_openat: return openat(fd, path2, static_cast<int>(a3), static_cast<mode_t>(a4));
    case SYS_creat: return creat(path1, static_cast<mode_t>(a2));
#ifdef SYS_openat2
    case SYS_openat2: return Openat2(a1, a2, a3, a4);
#endif
    case SYS_close: return close(fd);
#ifdef SYS_close_range
    case SYS_close_range:
      return close_range(static_cast<unsigned>(a1), static_cast<unsigned>(a2), static_cast<int>(a3));
#endif
    case SYS_dup: return dup(fd);
    case SYS_dup2: return dup2(fd, static_cast<int>(a2));
    case SYS_dup3: return dup3(fd, static_cast<int>(a2), static_cast<int>(a3));
    case SYS_fcntl: return fcntl(fd, static_cast<int>(a2), a3);
    case SYS_read: return read(fd, reinterpret_cast<void*>(a2), static_cast<size_t>(a3));
    case SYS_pread64: return pread64(fd, reinterpret_cast<void*>(a2), static_cast<size_t>(a3), a4);
    case SYS_readv: return readv(fd, reinterpret_cast<const struct iovec*>(a2), static_cast<int>(a3));
    case SYS_preadv: return preadv64(fd, reinterpret_cast<const struct iovec*>(a2), static_cast<int>(a3), a4);
    case SYS_preadv2:
      return preadv64v2(fd, reinterpret_cast<const struct iovec*>(a2), static_cast<int>(a3), a4, static_cast<int>(a6));
    case SYS_lseek: return lseek64(fd, a2, static_cast<int>(a3));
    case SYS_fstat: return fstat64(fd, reinterpret_cast<struct stat64*>(a2));
    case SYS_stat: return stat64(path1, reinterpret_cast<struct stat64*>(a2));
    case SYS_lstat: return lstat64(path1, reinterpret_cast<struct stat64*>(a2));
    case SYS_newfstatat: return fstatat64(fd, path2, reinterpret_cast<struct stat64*>(a3), static_cast<int>(a4));
    case SYS_statx:
      return statx(fd, path2, static_cast<int>(a3), static_cast<unsigned>(a4), reinterpret_cast<struct statx*>(a5));
    case SYS_mmap:
      if (fd >= 0 && !(a4 & MAP_ANONYMOUS)) {
        void* p = mmap64(reinterpret_cast<void*>(a1), static_cast<size_t>(a2), static_cast<int>(a3),
                         static_cast<int>(a4), static_cast<int>(a5), a6);
        return reinterpret_cast<long>(p);
      }
      break;
    case SYS_execve: return execve(path1, reinterpret_cast<char* const*>(a2), reinterpret_cast<char* const*>(a3));
    // kernel async I/O: lazy fds must be real before the kernel reads them
    case SYS_io_setup: async_io::Enter(); break;
    case SYS_io_submit: return IoSubmit(a1, a2, a3);
#ifdef SYS_io_uring_setup
    case SYS_io_uring_setup: async_io::Enter(); return FreshFd(RawSyscallErrno(n, a1, a2, a3, a4, a5, a6));
    case SYS_io_uring_register: async_io::Enter(); break;
#endif
    // new fd numbers
    case SYS_pipe: return FreshPair(RawSyscallErrno(n, a1), a1);
    case SYS_pipe2: return FreshPair(RawSyscallErrno(n, a1, a2), a1);
    case SYS_socketpair: return FreshPair(RawSyscallErrno(n, a1, a2, a3, a4), a4);
    case SYS_socket:
    case SYS_accept:
    case SYS_accept4:
    case SYS_memfd_create:
    case SYS_eventfd:
    case SYS_eventfd2:
    case SYS_epoll_create:
    case SYS_epoll_create1:
    case SYS_timerfd_create:
    case SYS_signalfd:
    case SYS_signalfd4:
    case SYS_inotify_init:
    case SYS_inotify_init1:
    case SYS_fanotify_init:
    case SYS_perf_event_open:
    case SYS_userfaultfd:
    case SYS_open_by_handle_at:
#ifdef SYS_pidfd_open
    case SYS_pidfd_open:
#endif
#ifdef SYS_pidfd_getfd
    case SYS_pidfd_getfd:
#endif
#ifdef SYS_open_tree
    case SYS_open_tree:
    case SYS_fsopen:
    case SYS_fsmount:
    case SYS_fspick:
#endif
      return FreshFd(RawSyscallErrno(n, a1, a2, a3, a4, a5, a6));
    default: break;
  }
  return RawSyscallErrno(n, a1, a2, a3, a4, a5, a6);
}
