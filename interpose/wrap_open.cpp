// open/openat/creat (plain, 64 and fortified), fopen/freopen, fclose: entry points that create fds and FILEs.
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ancestors.hpp"
#include "fd_identity.hpp"
#include "fd_table.hpp"
#include "lazy.hpp"
#include "ops.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

// open(2)'s mode argument exists only with O_CREAT or O_TMPFILE.
bool HasMode(int flags) { return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE; }

// An open of a classified path under the mount, with the kernel's errors on a read-only mount.
int OpenOurs(Resolved* r, int flags, bool lazy = false) {
  // The kernel rejects O_CREAT|O_DIRECTORY (without O_TMPFILE) before any lookup.
  if ((flags & (O_CREAT | O_DIRECTORY)) == (O_CREAT | O_DIRECTORY) && (flags & O_TMPFILE) != O_TMPFILE &&
      !(flags & O_PATH)) {
    errno = EINVAL;
    return -1;
  }
  Resolved classified = *r;
  LookUp(r);
  if (r->kind == Resolved::kFail) {
    // A missing path is created only with O_CREAT: EROFS then, unless its parent is missing too.
    errno = (r->err == ENOENT && (flags & O_CREAT) && !(flags & O_PATH)) ? CreateErrno(classified) : r->err;
    if (errno == EEXIST) errno = r->err;
    return -1;
  }
  perm::Caller who;  // the program's open: read permission as the kernel checks it
  return OpenEntry(r->id, flags, lazy, &who);
}

// The program is out of fds: the ones the client keeps only for later (cached memfds, idle node-chunk-cache files)
// go first, since the program would have them without us. True when some were closed: worth one more try.
bool ReleaseKeptFds() noexcept {
  return Serve([] { return g_client != nullptr && g_client->ReleaseKeptFds() > 0; }, false);
}

// What every open-style wrapper does, once; `pass(dirfd, path)` is the real call.
template <class Pass>
int OpenOnce(const char* call, int dirfd, const char* path, int flags, Pass pass) noexcept {
  if (!Active()) {
    int fd = pass(dirfd, path);
    // The Client's own files: close_range/closefrom in the program must not close them under us.
    if (fd >= 0 && t_inside) FdTable::MarkInternal(fd);
    return fd;
  }
  // O_NOFOLLOW, and O_CREAT|O_EXCL (which never follows), act on a symlink itself.
  const bool follow = !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL);
  Resolved r = SafeClassify(dirfd, path, follow);
  if (r.pass()) {
    lazy::BeforeReopen(path);
    int fd = pass(r.PassDirfd(dirfd), r.PassPath(path));
    if (fd >= 0) {
      // Forgets what the number was (closed behind our back, e.g. inside libc), and marks it when it is a
      // directory above the mount (rsync: open("/", O_PATH), then fstatat(fd, "fanstore")).
      int saved = errno;
      ancestors::NoteOpened(fd, r.PassDirfd(dirfd), r.PassPath(path));
      errno = saved;
    }
    return fd;
  }
  int saved = errno;
  int err = 0;
  int fd = Serve(
      [&]() -> int {
        int f = OpenOurs(&r, flags, /*lazy=*/true);
        if (f < 0) err = errno;
        return f;
      },
      -1);
  if (fd < 0 && err == 0) err = errno;
  return static_cast<int>(Finish(call, path, fd, err, saved));
}

// OpenOnce, again after EMFILE when the client let go of fds it kept.
template <class Pass>
int OpenCommon(const char* call, int dirfd, const char* path, int flags, Pass pass) noexcept {
  int fd = OpenOnce(call, dirfd, path, flags, pass);
  if (fd < 0 && errno == EMFILE && Active() && ReleaseKeptFds()) fd = OpenOnce(call, dirfd, path, flags, pass);
  return fd;
}

// fopen's mode as open(2) flags: r, w, a, optional '+', and the e (O_CLOEXEC) and x (O_EXCL) modifiers.
int ModeFlags(const char* mode) {
  if (mode == nullptr) return O_RDONLY;
  int flags = 0;
  bool plus = strchr(mode, '+') != nullptr;
  switch (mode[0]) {
    case 'w': flags = (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC; break;
    case 'a': flags = (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND; break;
    default: flags = plus ? O_RDWR : O_RDONLY; break;
  }
  if (strchr(mode, 'e')) flags |= O_CLOEXEC;
  if (strchr(mode, 'x')) flags |= O_EXCL;
  return flags;
}

template <class Pass>
FILE* FopenOnce(const char* call, const char* path, const char* mode, Pass pass) noexcept {
  if (!Active()) return pass(path);
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) {
    lazy::BeforeReopen(path);
    FILE* f = pass(r.PassPath(path));
    if (f != nullptr) fd_identity::Reused(fileno(f));  // libc opened it internally: the number is the program's
    return f;
  }
  int saved = errno;
  int err = 0;
  FILE* f = Serve(
      [&]() -> FILE* {
        int flags = ModeFlags(mode);
        int fd = OpenOurs(&r, flags);
        if (fd < 0) {
          err = errno;
          return nullptr;
        }
        FILE* fp = fdopen(fd, mode);  // a normal glibc FILE over a real fd: fread, fseek, mmap all work
        if (fp == nullptr) {
          err = errno;
          FdTable::Clear(fd);
          FS_REAL(close, fd);
        }
        return fp;
      },
      static_cast<FILE*>(nullptr));
  if (f == nullptr && err == 0) err = errno;
  Finish(call, path, f ? 0 : -1, err, saved);
  return f;
}

template <class Pass>
FILE* FopenCommon(const char* call, const char* path, const char* mode, Pass pass) noexcept {
  FILE* f = FopenOnce(call, path, mode, pass);
  if (f == nullptr && errno == EMFILE && Active() && ReleaseKeptFds()) f = FopenOnce(call, path, mode, pass);
  return f;
}

template <class Pass>
FILE* FreopenCommon(const char* call, const char* path, const char* mode, FILE* stream, Pass pass) noexcept {
  // freopen closes the stream's fd inside libc where we cannot see it.
  if (stream != nullptr) {
    FdTable::Clear(fileno(stream));
    lazy::Forget(fileno(stream));
  }
  if (!Active() || path == nullptr) return pass(path);
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) {
    FILE* f = pass(r.PassPath(path));
    if (f != nullptr) fd_identity::Reused(fileno(f));
    return f;
  }
  int saved = errno;
  int err = 0;
  FILE* f = Serve(
      [&]() -> FILE* {
        int flags = ModeFlags(mode);
        int fd = OpenOurs(&r, flags);
        if (fd < 0) {
          err = errno;
          return nullptr;
        }
        // Reopen the stream on /dev/null to keep the same FILE*, then put our fd under its descriptor.
        FILE* fp = pass("/dev/null");
        if (fp == nullptr) {
          err = errno;
          FdTable::Clear(fd);
          FS_REAL(close, fd);
          return nullptr;
        }
        int target = fileno(fp);
        if (FS_REAL(dup3, fd, target, (flags & O_CLOEXEC)) < 0) {
          err = errno;
          FdTable::Clear(fd);
          FS_REAL(close, fd);
          return nullptr;
        }
        FdTable::Copy(fd, target);
        FdTable::Clear(fd);
        FS_REAL(close, fd);
        return fp;
      },
      static_cast<FILE*>(nullptr));
  if (f == nullptr && err == 0) err = errno;
  Finish(call, path, f ? 0 : -1, err, saved);
  return f;
}

}  // namespace

FS_WRAPPER(int, open, (const char* path, int flags, ...)) {
  mode_t mode = 0;
  if (HasMode(flags)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return OpenCommon("open", AT_FDCWD, path, flags, [&](int, const char* p) { return FS_REAL(open, p, flags, mode); });
}

FS_WRAPPER(int, open64, (const char* path, int flags, ...)) {
  mode_t mode = 0;
  if (HasMode(flags)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return OpenCommon("open64", AT_FDCWD, path, flags,
                    [&](int, const char* p) { return FS_REAL(open64, p, flags, mode); });
}

FS_WRAPPER(int, openat, (int dirfd, const char* path, int flags, ...)) {
  mode_t mode = 0;
  if (HasMode(flags)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return OpenCommon("openat", dirfd, path, flags,
                    [&](int d, const char* p) { return FS_REAL(openat, d, p, flags, mode); });
}

FS_WRAPPER(int, openat64, (int dirfd, const char* path, int flags, ...)) {
  mode_t mode = 0;
  if (HasMode(flags)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return OpenCommon("openat64", dirfd, path, flags,
                    [&](int d, const char* p) { return FS_REAL(openat64, d, p, flags, mode); });
}

FS_WRAPPER(int, creat, (const char* path, mode_t mode)) {
  return OpenCommon("creat", AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC,
                    [&](int, const char* p) { return FS_REAL(creat, p, mode); });
}

FS_WRAPPER(int, creat64, (const char* path, mode_t mode)) {
  return OpenCommon("creat64", AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC,
                    [&](int, const char* p) { return FS_REAL(creat64, p, mode); });
}

FS_WRAPPER(int, __open_2, (const char* path, int flags)) {
  return OpenCommon("__open_2", AT_FDCWD, path, flags, [&](int, const char* p) { return FS_REAL(__open_2, p, flags); });
}

FS_WRAPPER(int, __open64_2, (const char* path, int flags)) {
  return OpenCommon("__open64_2", AT_FDCWD, path, flags,
                    [&](int, const char* p) { return FS_REAL(__open64_2, p, flags); });
}

FS_WRAPPER(int, __openat_2, (int dirfd, const char* path, int flags)) {
  return OpenCommon("__openat_2", dirfd, path, flags,
                    [&](int d, const char* p) { return FS_REAL(__openat_2, d, p, flags); });
}

FS_WRAPPER(int, __openat64_2, (int dirfd, const char* path, int flags)) {
  return OpenCommon("__openat64_2", dirfd, path, flags,
                    [&](int d, const char* p) { return FS_REAL(__openat64_2, d, p, flags); });
}

FS_WRAPPER(FILE*, fopen, (const char* path, const char* mode)) {
  return FopenCommon("fopen", path, mode, [&](const char* p) { return FS_REAL(fopen, p, mode); });
}

FS_WRAPPER(FILE*, fopen64, (const char* path, const char* mode)) {
  return FopenCommon("fopen64", path, mode, [&](const char* p) { return FS_REAL(fopen64, p, mode); });
}

FS_WRAPPER(FILE*, freopen, (const char* path, const char* mode, FILE* stream)) {
  return FreopenCommon("freopen", path, mode, stream, [&](const char* p) { return FS_REAL(freopen, p, mode, stream); });
}

FS_WRAPPER(FILE*, freopen64, (const char* path, const char* mode, FILE* stream)) {
  return FreopenCommon("freopen64", path, mode, stream,
                       [&](const char* p) { return FS_REAL(freopen64, p, mode, stream); });
}

// fclose closes its fd inside libc, invisible to our close(): forget the fd first (numpy's fromfile
// does dup -> fdopen -> fclose on our fds).
FS_WRAPPER(int, fclose, (FILE * stream)) {
  if (stream != nullptr) {
    FdTable::Clear(fileno(stream));
    lazy::Forget(fileno(stream));
  }
  return FS_REAL(fclose, stream);
}
