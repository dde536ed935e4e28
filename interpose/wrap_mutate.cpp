// Every call that would change the file system: EROFS when any path (or fd) it names is under the mount.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <utime.h>

#include "fd_table.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

// EROFS needs no lookup: the image is read-only whether or not the path exists.
int Refuse(const char* call, const char* path) {
  TraceCall(call, path, -1, EROFS);
  errno = EROFS;
  return -1;
}

template <class Pass>
int MutatePath(const char* call, int dirfd, const char* path, Pass pass) noexcept {
  if (!Active()) return pass(dirfd, path);
  Resolved r = SafeClassify(dirfd, path, /*follow_last=*/false);  // unlink of a link removes the link
  if (r.pass()) return pass(r.PassDirfd(dirfd), r.PassPath(path));
  if (r.kind == Resolved::kFail) {
    TraceCall(call, path, -1, r.err);
    errno = r.err;
    return -1;
  }
  return Refuse(call, path);
}

// Calls that look the path up before they would write (chmod, chown, truncate, utime*): a missing
// path is ENOENT/ENOTDIR as on a read-only mount, an existing one EROFS (truncate of a directory EISDIR).
// A symlink is followed (into the real file system too, as the kernel would) unless `follow` is false.
template <class Pass>
int MutateExisting(const char* call, int dirfd, const char* path, Pass pass, bool truncates = false,
                   bool follow = true) noexcept {
  if (!Active()) return pass(dirfd, path);
  Resolved r = SafeClassify(dirfd, path, follow);
  if (r.pass()) return pass(r.PassDirfd(dirfd), r.PassPath(path));
  return ServePath(call, r, path,
                   [&](uint32_t id) { return truncates && g_client->image().Get(id).is_dir() ? EISDIR : EROFS; });
}

// Calls that create a new name (mkdir, mknod, mkfifo, symlink): EEXIST when it exists, ENOENT/ENOTDIR
// when its parent does not, EROFS otherwise -- the kernel's order on a read-only mount.
template <class Pass>
int MutateCreate(const char* call, int dirfd, const char* path, Pass pass) noexcept {
  if (!Active()) return pass(dirfd, path);
  Resolved r = SafeClassify(dirfd, path, /*follow_last=*/false);  // an existing link is EEXIST
  if (r.pass()) return pass(r.PassDirfd(dirfd), r.PassPath(path));
  int saved = errno;
  int err = r.kind == Resolved::kFail ? r.err : Serve([&] { return CreateErrno(r); }, ENOMEM);
  return static_cast<int>(Finish(call, path, -1, err, saved));
}

// rename: refused with EROFS when either side is ours; otherwise both (possibly rewritten) paths go to
// libc. Linux says EXDEV when only one side is on the read-only mount; EROFS is kept on purpose, so
// `mv` out of the mount fails instead of copying the file and then failing to remove the original.
template <class Pass>
int MutateTwo(const char* call, int d1, const char* p1, int d2, const char* p2, Pass pass) noexcept {
  if (!Active()) return pass(d1, p1, d2, p2);
  Resolved a = SafeClassify(d1, p1, false);  // rename moves names, links included
  Resolved b = SafeClassify(d2, p2, false);
  if (a.pass() && b.pass()) return pass(a.PassDirfd(d1), a.PassPath(p1), b.PassDirfd(d2), b.PassPath(p2));
  return Refuse(call, a.pass() ? p2 : p1);
}

// link: the source is looked up first (ENOENT), then the new name is created (EEXIST/ENOENT/EROFS); a link
// from the mount to elsewhere is EXDEV (into the mount the read-only check comes first: EROFS).
// `src_ours_fd` is set for linkat(ourfd, "", AT_EMPTY_PATH), whose source is the fd itself.
template <class Pass>
int LinkCommon(const char* call, int d1, const char* p1, int d2, const char* p2, bool src_ours_fd, Pass pass) noexcept {
  if (!Active()) return pass(d1, p1, d2, p2);
  Resolved b = SafeClassify(d2, p2, false);
  Resolved a;
  if (!src_ours_fd) {
    a = SafeClassify(d1, p1, false);  // link(2) does not follow its source (linkat without AT_SYMLINK_FOLLOW)
    if (a.pass() && b.pass()) return pass(a.PassDirfd(d1), a.PassPath(p1), b.PassDirfd(d2), b.PassPath(p2));
  }
  int saved = errno;
  int err = Serve(
      [&]() -> int {
        bool src_ours = src_ours_fd || !a.pass();
        if (src_ours && !src_ours_fd) {
          Resolved src = a;
          LookUp(&src);
          if (src.kind == Resolved::kFail) return src.err;
        }
        if (b.pass()) return EXDEV;  // ours -> elsewhere
        if (b.kind == Resolved::kFail) return b.err;
        // Elsewhere -> ours: the kernel creates the new name (EEXIST, the parent's ENOENT, EROFS) before
        // it compares the two mounts, so a read-only mount says EROFS, not EXDEV.
        return CreateErrno(b);
      },
      ENOMEM);
  return static_cast<int>(Finish(call, src_ours_fd || a.pass() ? p2 : p1, -1, err, saved));
}

int RefuseFd(const char* call, int fd) {
  TraceFd(call, fd, -1, EROFS);
  errno = EROFS;
  return -1;
}

template <class Pass>
int MutateFd(const char* call, int fd, Pass pass) noexcept {
  if (!Active() || !FdTable::IsOurs(FdTable::Raw(fd))) return pass();
  TraceFd(call, fd, -1, EROFS);
  errno = EROFS;
  return -1;
}

}  // namespace

FS_WRAPPER(int, mkdir, (const char* path, mode_t mode)) {
  return MutateCreate("mkdir", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(mkdir, p, mode); });
}
FS_WRAPPER(int, mkdirat, (int dirfd, const char* path, mode_t mode)) {
  return MutateCreate("mkdirat", dirfd, path, [&](int d, const char* p) { return FS_REAL(mkdirat, d, p, mode); });
}
FS_WRAPPER(int, rmdir, (const char* path)) {
  return MutatePath("rmdir", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(rmdir, p); });
}
FS_WRAPPER(int, unlink, (const char* path)) {
  return MutatePath("unlink", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(unlink, p); });
}
FS_WRAPPER(int, unlinkat, (int dirfd, const char* path, int flags)) {
  return MutatePath("unlinkat", dirfd, path, [&](int d, const char* p) { return FS_REAL(unlinkat, d, p, flags); });
}
FS_WRAPPER(int, rename, (const char* from, const char* to)) {
  return MutateTwo("rename", AT_FDCWD, from, AT_FDCWD, to,
                   [&](int, const char* a, int, const char* b) { return FS_REAL(rename, a, b); });
}
FS_WRAPPER(int, renameat, (int d1, const char* from, int d2, const char* to)) {
  return MutateTwo("renameat", d1, from, d2, to,
                   [&](int a1, const char* a, int b1, const char* b) { return FS_REAL(renameat, a1, a, b1, b); });
}
FS_WRAPPER(int, renameat2, (int d1, const char* from, int d2, const char* to, unsigned int flags)) {
  return MutateTwo("renameat2", d1, from, d2, to, [&](int a1, const char* a, int b1, const char* b) {
    return FS_REAL(renameat2, a1, a, b1, b, flags);
  });
}
FS_WRAPPER(int, link, (const char* from, const char* to)) {
  return LinkCommon("link", AT_FDCWD, from, AT_FDCWD, to, false,
                    [&](int, const char* a, int, const char* b) { return FS_REAL(link, a, b); });
}
FS_WRAPPER(int, linkat, (int d1, const char* from, int d2, const char* to, int flags)) {
  bool ours = false;
  uint32_t id;
  if (Active() && SafeEmptyPath(d1, from, flags, &ours, &id) && !ours) {
    Resolved b = SafeClassify(d2, to, false);
    if (b.pass()) return FS_REAL(linkat, d1, from, b.PassDirfd(d2), b.PassPath(to), flags);
  }
  return LinkCommon("linkat", d1, from, d2, to, ours,
                    [&](int a1, const char* a, int b1, const char* b) { return FS_REAL(linkat, a1, a, b1, b, flags); });
}
// symlink's target is just text; only the new link's location matters.
FS_WRAPPER(int, symlink, (const char* target, const char* path)) {
  return MutateCreate("symlink", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(symlink, target, p); });
}
FS_WRAPPER(int, symlinkat, (const char* target, int dirfd, const char* path)) {
  return MutateCreate("symlinkat", dirfd, path, [&](int d, const char* p) { return FS_REAL(symlinkat, target, d, p); });
}
FS_WRAPPER(int, truncate, (const char* path, off_t len)) {
  return MutateExisting(
      "truncate", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(truncate, p, len); }, true);
}
FS_WRAPPER(int, truncate64, (const char* path, off64_t len)) {
  return MutateExisting(
      "truncate64", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(truncate64, p, len); }, true);
}
FS_WRAPPER(int, ftruncate, (int fd, off_t len)) {
  return MutateFd("ftruncate", fd, [&] { return FS_REAL(ftruncate, fd, len); });
}
FS_WRAPPER(int, ftruncate64, (int fd, off64_t len)) {
  return MutateFd("ftruncate64", fd, [&] { return FS_REAL(ftruncate64, fd, len); });
}
FS_WRAPPER(int, chmod, (const char* path, mode_t mode)) {
  return MutateExisting("chmod", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(chmod, p, mode); });
}
FS_WRAPPER(int, fchmod, (int fd, mode_t mode)) {
  return MutateFd("fchmod", fd, [&] { return FS_REAL(fchmod, fd, mode); });
}
// fchmodat/fchownat(fd, "", ..., AT_EMPTY_PATH) name the fd itself: on our fds that is EROFS, never the
// backing fd ("/" for a directory) that the real call would change.
FS_WRAPPER(int, fchmodat, (int dirfd, const char* path, mode_t mode, int flags)) {
  bool ours;
  uint32_t id;
  if (Active() && SafeEmptyPath(dirfd, path, flags, &ours, &id) && ours) return RefuseFd("fchmodat", dirfd);
  return MutateExisting(
      "fchmodat", dirfd, path, [&](int d, const char* p) { return FS_REAL(fchmodat, d, p, mode, flags); }, false,
      !(flags & AT_SYMLINK_NOFOLLOW));
}
FS_WRAPPER(int, chown, (const char* path, uid_t uid, gid_t gid)) {
  return MutateExisting("chown", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(chown, p, uid, gid); });
}
FS_WRAPPER(int, fchown, (int fd, uid_t uid, gid_t gid)) {
  return MutateFd("fchown", fd, [&] { return FS_REAL(fchown, fd, uid, gid); });
}
FS_WRAPPER(int, lchown, (const char* path, uid_t uid, gid_t gid)) {
  return MutateExisting(
      "lchown", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(lchown, p, uid, gid); }, false, false);
}
FS_WRAPPER(int, fchownat, (int dirfd, const char* path, uid_t uid, gid_t gid, int flags)) {
  bool ours;
  uint32_t id;
  if (Active() && SafeEmptyPath(dirfd, path, flags, &ours, &id) && ours) return RefuseFd("fchownat", dirfd);
  return MutateExisting(
      "fchownat", dirfd, path, [&](int d, const char* p) { return FS_REAL(fchownat, d, p, uid, gid, flags); }, false,
      !(flags & AT_SYMLINK_NOFOLLOW));
}
FS_WRAPPER(int, utime, (const char* path, const struct utimbuf* times)) {
  return MutateExisting("utime", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(utime, p, times); });
}
FS_WRAPPER(int, utimes, (const char* path, const struct timeval times[2])) {
  return MutateExisting("utimes", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(utimes, p, times); });
}
FS_WRAPPER(int, lutimes, (const char* path, const struct timeval times[2])) {
  return MutateExisting(
      "lutimes", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(lutimes, p, times); }, false, false);
}
FS_WRAPPER(int, futimesat, (int dirfd, const char* path, const struct timeval times[2])) {
  if (path == nullptr) return MutateFd("futimesat", dirfd, [&] { return FS_REAL(futimesat, dirfd, path, times); });
  return MutateExisting("futimesat", dirfd, path,
                        [&](int d, const char* p) { return FS_REAL(futimesat, d, p, times); });
}
FS_WRAPPER(int, utimensat, (int dirfd, const char* path, const struct timespec times[2], int flags)) {
  // A NULL path (or "" with AT_EMPTY_PATH) means the dirfd itself, as futimens.
  if (path == nullptr || ((flags & AT_EMPTY_PATH) && path[0] == '\0'))
    return MutateFd("utimensat", dirfd, [&] { return FS_REAL(utimensat, dirfd, path, times, flags); });
  return MutateExisting(
      "utimensat", dirfd, path, [&](int d, const char* p) { return FS_REAL(utimensat, d, p, times, flags); }, false,
      !(flags & AT_SYMLINK_NOFOLLOW));
}
FS_WRAPPER(int, futimens, (int fd, const struct timespec times[2])) {
  return MutateFd("futimens", fd, [&] { return FS_REAL(futimens, fd, times); });
}
FS_WRAPPER(int, mknod, (const char* path, mode_t mode, dev_t dev)) {
  return MutateCreate("mknod", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(mknod, p, mode, dev); });
}
FS_WRAPPER(int, mknodat, (int dirfd, const char* path, mode_t mode, dev_t dev)) {
  return MutateCreate("mknodat", dirfd, path, [&](int d, const char* p) { return FS_REAL(mknodat, d, p, mode, dev); });
}
FS_WRAPPER(int, mkfifo, (const char* path, mode_t mode)) {
  return MutateCreate("mkfifo", AT_FDCWD, path, [&](int, const char* p) { return FS_REAL(mkfifo, p, mode); });
}
FS_WRAPPER(int, mkfifoat, (int dirfd, const char* path, mode_t mode)) {
  return MutateCreate("mkfifoat", dirfd, path, [&](int d, const char* p) { return FS_REAL(mkfifoat, d, p, mode); });
}
