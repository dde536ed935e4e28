// The stat family: stat/lstat/fstat/fstatat (plain and 64), the legacy __xstat ABI, and statx.
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "fd_table.hpp"
#include "ops.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

// On x86-64 the 64 variants share the plain layout, which is what lets one FillStat serve both.
static_assert(sizeof(struct stat) == sizeof(struct stat64), "stat and stat64 must share a layout");

namespace {

// stat/lstat on a path: lstat (`nofollow`) reports a symlink of the image itself, stat what it leads to. So does
// /proc/self/fd/N of one of our fds, a link as on any file system: realpath implementations walk paths with
// lstat and readlink.
template <class Pass>
int StatPath(const char* call, int dirfd, const char* path, void* st, Pass pass, bool nofollow = false) noexcept {
  if (!Active()) return pass(dirfd, path);
  Resolved r = SafeClassify(dirfd, path, !nofollow);
  if (r.pass()) return pass(r.PassDirfd(dirfd), r.PassPath(path));
  if (nofollow && r.fd_link) return pass(dirfd, path);
  return ServePath(call, r, path, [&](uint32_t id) {
    StatEntry(id, static_cast<struct stat*>(st));
    return 0;
  });
}

// fstat on a tracked fd: the image's stat data (stable st_ino, mode, mtime), not the memfd's.
template <class Pass>
int StatFd(const char* call, int fd, void* st, Pass pass) noexcept {
  uint32_t id;
  if (!FdTable::Lookup(fd, &id) || !Active()) return pass();
  int saved = errno;
  Serve(
      [&] {
        StatEntry(id, static_cast<struct stat*>(st));
        return 0;
      },
      0);
  TraceFd(call, fd, 0, 0);
  errno = saved;
  return 0;
}

// fstatat: an empty (or NULL) path with AT_EMPTY_PATH means the dirfd itself.
template <class Pass>
int StatAt(const char* call, int dirfd, const char* path, void* st, int flags, Pass pass) noexcept {
  bool ours;
  uint32_t id;
  if (Active() && SafeEmptyPath(dirfd, path, flags, &ours, &id)) {
    if (!ours) return pass(dirfd, path);
    int saved = errno;
    Serve(
        [&] {
          StatEntry(id, static_cast<struct stat*>(st));
          return 0;
        },
        0);
    TraceFd(call, dirfd, 0, 0);
    errno = saved;
    return 0;
  }
  return StatPath(call, dirfd, path, st, pass, (flags & AT_SYMLINK_NOFOLLOW) != 0);
}

}  // namespace

FS_WRAPPER(int, stat, (const char* path, struct stat* st)) {
  return StatPath("stat", AT_FDCWD, path, st, [&](int, const char* p) { return FS_REAL(stat, p, st); });
}
FS_WRAPPER(int, stat64, (const char* path, struct stat64* st)) {
  return StatPath("stat64", AT_FDCWD, path, st, [&](int, const char* p) { return FS_REAL(stat64, p, st); });
}
FS_WRAPPER(int, lstat, (const char* path, struct stat* st)) {
  return StatPath(
      "lstat", AT_FDCWD, path, st, [&](int, const char* p) { return FS_REAL(lstat, p, st); }, true);
}
FS_WRAPPER(int, lstat64, (const char* path, struct stat64* st)) {
  return StatPath(
      "lstat64", AT_FDCWD, path, st, [&](int, const char* p) { return FS_REAL(lstat64, p, st); }, true);
}
FS_WRAPPER(int, fstat, (int fd, struct stat* st)) {
  return StatFd("fstat", fd, st, [&] { return FS_REAL(fstat, fd, st); });
}
FS_WRAPPER(int, fstat64, (int fd, struct stat64* st)) {
  return StatFd("fstat64", fd, st, [&] { return FS_REAL(fstat64, fd, st); });
}
FS_WRAPPER(int, fstatat, (int dirfd, const char* path, struct stat* st, int flags)) {
  return StatAt("fstatat", dirfd, path, st, flags,
                [&](int d, const char* p) { return FS_REAL(fstatat, d, p, st, flags); });
}
FS_WRAPPER(int, fstatat64, (int dirfd, const char* path, struct stat64* st, int flags)) {
  return StatAt("fstatat64", dirfd, path, st, flags,
                [&](int d, const char* p) { return FS_REAL(fstatat64, d, p, st, flags); });
}

// The pre-2.33 ABI: `ver` is _STAT_VER_LINUX (1) on x86-64, whose struct is today's struct stat.
FS_WRAPPER(int, __xstat, (int ver, const char* path, struct stat* st)) {
  return StatPath("__xstat", AT_FDCWD, path, st, [&](int, const char* p) { return FS_REAL(__xstat, ver, p, st); });
}
FS_WRAPPER(int, __xstat64, (int ver, const char* path, struct stat64* st)) {
  return StatPath("__xstat64", AT_FDCWD, path, st, [&](int, const char* p) { return FS_REAL(__xstat64, ver, p, st); });
}
FS_WRAPPER(int, __lxstat, (int ver, const char* path, struct stat* st)) {
  return StatPath(
      "__lxstat", AT_FDCWD, path, st, [&](int, const char* p) { return FS_REAL(__lxstat, ver, p, st); }, true);
}
FS_WRAPPER(int, __lxstat64, (int ver, const char* path, struct stat64* st)) {
  return StatPath(
      "__lxstat64", AT_FDCWD, path, st, [&](int, const char* p) { return FS_REAL(__lxstat64, ver, p, st); }, true);
}
FS_WRAPPER(int, __fxstat, (int ver, int fd, struct stat* st)) {
  return StatFd("__fxstat", fd, st, [&] { return FS_REAL(__fxstat, ver, fd, st); });
}
FS_WRAPPER(int, __fxstat64, (int ver, int fd, struct stat64* st)) {
  return StatFd("__fxstat64", fd, st, [&] { return FS_REAL(__fxstat64, ver, fd, st); });
}
FS_WRAPPER(int, __fxstatat, (int ver, int dirfd, const char* path, struct stat* st, int flags)) {
  return StatAt("__fxstatat", dirfd, path, st, flags,
                [&](int d, const char* p) { return FS_REAL(__fxstatat, ver, d, p, st, flags); });
}
FS_WRAPPER(int, __fxstatat64, (int ver, int dirfd, const char* path, struct stat64* st, int flags)) {
  return StatAt("__fxstatat64", dirfd, path, st, flags,
                [&](int d, const char* p) { return FS_REAL(__fxstatat64, ver, d, p, st, flags); });
}

// statx: what `ls -l` and coreutils call on glibc 2.36 (the old FanStore missed it entirely).
FS_WRAPPER(int, statx, (int dirfd, const char* path, int flags, unsigned int mask, struct statx* stx)) {
  if (!Active()) return FS_REAL(statx, dirfd, path, flags, mask, stx);
  bool ours;
  uint32_t id;
  if (SafeEmptyPath(dirfd, path, flags, &ours, &id)) {  // path may be NULL here (Linux 6.11+)
    if (!ours) return FS_REAL(statx, dirfd, path, flags, mask, stx);
    int saved = errno;
    Serve(
        [&] {
          StatxEntry(id, stx);
          return 0;
        },
        0);
    TraceFd("statx", dirfd, 0, 0);
    errno = saved;
    return 0;
  }
  Resolved r = SafeClassify(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW));
  if (r.pass()) return FS_REAL(statx, r.PassDirfd(dirfd), r.PassPath(path), flags, mask, stx);
  if (r.fd_link && (flags & AT_SYMLINK_NOFOLLOW)) return FS_REAL(statx, dirfd, path, flags, mask, stx);
  return ServePath("statx", r, path, [&](uint32_t id) {
    StatxEntry(id, stx);
    return 0;
  });
}
