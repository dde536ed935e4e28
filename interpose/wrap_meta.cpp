// Metadata calls that only read: access, readlink, realpath, extended attributes, statfs/statvfs, fadvise/flock.
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fd_table.hpp"
#include "lazy.hpp"
#include "ops.hpp"
#include "perm.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

template <class Pass>
int AccessCommon(const char* call, int dirfd, const char* path, int mode, bool effective, int flags,
                 Pass pass) noexcept {
  if (!Active()) return pass(dirfd, path);
  // The kernel checks with the real ids for the whole call, the walk through the directories included.
  perm::RealIdsScope ids(!effective);
  bool ours;
  uint32_t id;
  if (SafeEmptyPath(dirfd, path, flags, &ours, &id)) {  // faccessat(fd, "", mode, AT_EMPTY_PATH)
    if (!ours) return pass(dirfd, path);
    int saved = errno;
    int err = Serve([&] { return AccessEntry(id, mode, effective); }, ENOMEM);
    TraceFd(call, dirfd, err ? -1 : 0, err);
    errno = err ? err : saved;
    return err ? -1 : 0;
  }
  Resolved r = SafeClassify(dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW));
  if (r.pass()) return pass(r.PassDirfd(dirfd), r.PassPath(path));
  return ServePath(call, r, path, [&](uint32_t id) { return AccessEntry(id, mode, effective); });
}

// A symlink of the image says its target verbatim; any other entry is EINVAL. /proc/self/fd/N of one of our fds
// is a link too: it says the entry's path.
template <class Pass>
ssize_t ReadlinkCommon(const char* call, int dirfd, const char* path, char* buf, size_t len, Pass pass) noexcept {
  if (!Active()) return pass(dirfd, path);
  Resolved r = SafeClassify(dirfd, path, /*follow_last=*/false);
  if (r.pass()) return pass(r.PassDirfd(dirfd), r.PassPath(path));
  if (r.fd_link && r.kind == Resolved::kOurs) {
    int saved = errno;
    ssize_t n = Serve(
        [&]() -> ssize_t {
          std::string target = AbsoluteOf(r.rel);
          size_t k = target.size() < len ? target.size() : len;  // truncated, no NUL: as readlink(2)
          memcpy(buf, target.data(), k);
          return static_cast<ssize_t>(k);
        },
        static_cast<ssize_t>(-1));
    return Finish(call, path, n, errno, saved);
  }
  ssize_t n = -1;
  int rc = ServePath(call, r, path, [&](uint32_t id) {
    const fanstore::Entry e = g_client->image().Get(id);
    if (!e.is_link()) return EINVAL;
    auto target = g_client->image().LinkTarget(e);
    if (!target.ok()) return EIO;
    size_t k = target->size() < len ? target->size() : len;  // truncated, no NUL: as readlink(2)
    memcpy(buf, target->data(), k);
    n = static_cast<ssize_t>(k);
    return 0;
  });
  return rc == 0 ? n : -1;
}

// realpath of ours: the path Classify reached through the image's symlinks, when it exists (one leading out of the
// image is the real realpath's).
template <class Pass>
char* RealpathCommon(const char* call, const char* path, char* resolved, Pass pass) noexcept {
  if (!Active()) return pass(path);
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) return pass(r.PassPath(path));
  char* out = nullptr;
  int rc = ServePath(call, r, path, [&](uint32_t) {
    std::string abs = AbsoluteOf(r.rel);
    if (abs.size() >= PATH_MAX) return ENAMETOOLONG;
    if (resolved != nullptr) {
      memcpy(resolved, abs.c_str(), abs.size() + 1);
      out = resolved;
    } else {
      out = strdup(abs.c_str());
      if (out == nullptr) return ENOMEM;
    }
    return 0;
  });
  return rc == 0 ? out : nullptr;
}

// xattr reads on a path: ENODATA for a name, an empty list; writes: EROFS.
template <class Pass>
ssize_t XattrPath(const char* call, const char* path, int result_err, Pass pass) noexcept {
  if (!Active()) return pass(path);
  Resolved r = SafeClassify(AT_FDCWD, path, call[0] != 'l');  // lgetxattr & co. act on a symlink itself
  if (r.pass()) return pass(r.PassPath(path));
  // Writes (EROFS) look the path up first too: a missing path is ENOENT, as on a read-only mount.
  return ServePath(call, r, path, [&](uint32_t) { return result_err; });
}

template <class Pass>
ssize_t XattrFd(const char* call, int fd, int result_err, Pass pass) noexcept {
  uint32_t id;
  if (!FdTable::Lookup(fd, &id) || !Active()) return pass();
  TraceFd(call, fd, result_err ? -1 : 0, result_err);
  if (result_err == 0) return 0;
  errno = result_err;
  return -1;
}

// Read-only numbers for statfs/statvfs: total = the image's bytes, nothing free, ST_RDONLY.
constexpr long kFanstoreMagic = 0x46414e53;  // "FANS"
void ImageTotals(uint64_t* bytes, uint64_t* files) {
  static std::atomic<uint64_t> b{UINT64_MAX}, f{0};
  uint64_t v = b.load(std::memory_order_acquire);
  if (v == UINT64_MAX) {
    fanstore::ImageSummary s = g_client->image().Summary();
    f.store(g_client->image().size(), std::memory_order_relaxed);
    v = s.bytes_in;
    b.store(v, std::memory_order_release);
  }
  *bytes = v;
  *files = f.load(std::memory_order_relaxed);
}

void FillStatfs(struct statfs* s) {
  uint64_t bytes, files;
  ImageTotals(&bytes, &files);
  memset(s, 0, sizeof *s);
  s->f_type = kFanstoreMagic;
  s->f_bsize = 4096;
  s->f_frsize = 4096;
  s->f_blocks = (bytes + 4095) / 4096;
  s->f_files = files;
  s->f_namelen = NAME_MAX;
  s->f_flags = ST_RDONLY | ST_NOSUID | ST_NODEV;
}

void FillStatvfs(struct statvfs* s) {
  struct statfs f;
  FillStatfs(&f);
  memset(s, 0, sizeof *s);
  s->f_bsize = f.f_bsize;
  s->f_frsize = f.f_frsize;
  s->f_blocks = f.f_blocks;
  s->f_files = f.f_files;
  s->f_namemax = f.f_namelen;
  s->f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
}

template <class T, class Fill, class Pass>
int StatfsPath(const char* call, const char* path, T* out, Fill fill, Pass pass) noexcept {
  if (!Active()) return pass(path);
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) return pass(r.PassPath(path));
  return ServePath(call, r, path, [&](uint32_t) {
    fill(out);
    return 0;
  });
}

template <class T, class Fill, class Pass>
int StatfsFd(const char* call, int fd, T* out, Fill fill, Pass pass) noexcept {
  uint32_t id;
  if (!FdTable::Lookup(fd, &id) || !Active()) return pass();
  int saved = errno;
  int rc = Serve(
      [&] {
        fill(out);
        return 0;
      },
      -1);
  TraceFd(call, fd, rc, errno);
  if (rc == 0) errno = saved;
  return rc;
}

}  // namespace

FS_WRAPPER(int, access, (const char* path, int mode)) {
  return AccessCommon("access", AT_FDCWD, path, mode, false, 0,
                      [&](int, const char* p) { return FS_REAL(access, p, mode); });
}
FS_WRAPPER(int, faccessat, (int dirfd, const char* path, int mode, int flags)) {
  return AccessCommon("faccessat", dirfd, path, mode, (flags & AT_EACCESS) != 0, flags,
                      [&](int d, const char* p) { return FS_REAL(faccessat, d, p, mode, flags); });
}
FS_WRAPPER(int, euidaccess, (const char* path, int mode)) {
  return AccessCommon("euidaccess", AT_FDCWD, path, mode, true, 0,
                      [&](int, const char* p) { return FS_REAL(euidaccess, p, mode); });
}
FS_WRAPPER(int, eaccess, (const char* path, int mode)) {
  return AccessCommon("eaccess", AT_FDCWD, path, mode, true, 0,
                      [&](int, const char* p) { return FS_REAL(eaccess, p, mode); });
}

FS_WRAPPER(ssize_t, readlink, (const char* path, char* buf, size_t len)) {
  return ReadlinkCommon("readlink", AT_FDCWD, path, buf, len,
                        [&](int, const char* p) { return FS_REAL(readlink, p, buf, len); });
}
FS_WRAPPER(ssize_t, __readlink_chk, (const char* path, char* buf, size_t len, size_t buflen)) {
  return ReadlinkCommon("__readlink_chk", AT_FDCWD, path, buf, len,
                        [&](int, const char* p) { return FS_REAL(__readlink_chk, p, buf, len, buflen); });
}
FS_WRAPPER(ssize_t, readlinkat, (int dirfd, const char* path, char* buf, size_t len)) {
  return ReadlinkCommon("readlinkat", dirfd, path, buf, len,
                        [&](int d, const char* p) { return FS_REAL(readlinkat, d, p, buf, len); });
}
FS_WRAPPER(ssize_t, __readlinkat_chk, (int dirfd, const char* path, char* buf, size_t len, size_t buflen)) {
  return ReadlinkCommon("__readlinkat_chk", dirfd, path, buf, len,
                        [&](int d, const char* p) { return FS_REAL(__readlinkat_chk, d, p, buf, len, buflen); });
}

FS_WRAPPER(char*, realpath, (const char* path, char* resolved)) {
  return RealpathCommon("realpath", path, resolved, [&](const char* p) { return FS_REAL(realpath, p, resolved); });
}
FS_WRAPPER(char*, __realpath_chk, (const char* path, char* resolved, size_t resolvedlen)) {
  return RealpathCommon("__realpath_chk", path, resolved,
                        [&](const char* p) { return FS_REAL(__realpath_chk, p, resolved, resolvedlen); });
}
FS_WRAPPER(char*, canonicalize_file_name, (const char* path)) {
  return RealpathCommon("canonicalize_file_name", path, nullptr,
                        [&](const char* p) { return FS_REAL(canonicalize_file_name, p); });
}

FS_WRAPPER(ssize_t, getxattr, (const char* path, const char* name, void* value, size_t size)) {
  return XattrPath("getxattr", path, ENODATA, [&](const char* p) { return FS_REAL(getxattr, p, name, value, size); });
}
FS_WRAPPER(ssize_t, lgetxattr, (const char* path, const char* name, void* value, size_t size)) {
  return XattrPath("lgetxattr", path, ENODATA, [&](const char* p) { return FS_REAL(lgetxattr, p, name, value, size); });
}
FS_WRAPPER(ssize_t, fgetxattr, (int fd, const char* name, void* value, size_t size)) {
  return XattrFd("fgetxattr", fd, ENODATA, [&] { return FS_REAL(fgetxattr, fd, name, value, size); });
}
FS_WRAPPER(ssize_t, listxattr, (const char* path, char* list, size_t size)) {
  return XattrPath("listxattr", path, 0, [&](const char* p) { return FS_REAL(listxattr, p, list, size); });
}
FS_WRAPPER(ssize_t, llistxattr, (const char* path, char* list, size_t size)) {
  return XattrPath("llistxattr", path, 0, [&](const char* p) { return FS_REAL(llistxattr, p, list, size); });
}
FS_WRAPPER(ssize_t, flistxattr, (int fd, char* list, size_t size)) {
  return XattrFd("flistxattr", fd, 0, [&] { return FS_REAL(flistxattr, fd, list, size); });
}
FS_WRAPPER(int, setxattr, (const char* path, const char* name, const void* value, size_t size, int flags)) {
  return static_cast<int>(XattrPath("setxattr", path, EROFS, [&](const char* p) {
    return static_cast<ssize_t>(FS_REAL(setxattr, p, name, value, size, flags));
  }));
}
FS_WRAPPER(int, lsetxattr, (const char* path, const char* name, const void* value, size_t size, int flags)) {
  return static_cast<int>(XattrPath("lsetxattr", path, EROFS, [&](const char* p) {
    return static_cast<ssize_t>(FS_REAL(lsetxattr, p, name, value, size, flags));
  }));
}
FS_WRAPPER(int, fsetxattr, (int fd, const char* name, const void* value, size_t size, int flags)) {
  return static_cast<int>(XattrFd(
      "fsetxattr", fd, EROFS, [&] { return static_cast<ssize_t>(FS_REAL(fsetxattr, fd, name, value, size, flags)); }));
}
FS_WRAPPER(int, removexattr, (const char* path, const char* name)) {
  return static_cast<int>(XattrPath(
      "removexattr", path, EROFS, [&](const char* p) { return static_cast<ssize_t>(FS_REAL(removexattr, p, name)); }));
}
FS_WRAPPER(int, lremovexattr, (const char* path, const char* name)) {
  return static_cast<int>(XattrPath("lremovexattr", path, EROFS, [&](const char* p) {
    return static_cast<ssize_t>(FS_REAL(lremovexattr, p, name));
  }));
}
FS_WRAPPER(int, fremovexattr, (int fd, const char* name)) {
  return static_cast<int>(
      XattrFd("fremovexattr", fd, EROFS, [&] { return static_cast<ssize_t>(FS_REAL(fremovexattr, fd, name)); }));
}

FS_WRAPPER(int, statfs, (const char* path, struct statfs* s)) {
  return StatfsPath("statfs", path, s, FillStatfs, [&](const char* p) { return FS_REAL(statfs, p, s); });
}
FS_WRAPPER(int, statfs64, (const char* path, struct statfs64* s)) {
  static_assert(sizeof(struct statfs) == sizeof(struct statfs64));
  return StatfsPath("statfs64", path, reinterpret_cast<struct statfs*>(s), FillStatfs,
                    [&](const char* p) { return FS_REAL(statfs64, p, s); });
}
FS_WRAPPER(int, statvfs, (const char* path, struct statvfs* s)) {
  return StatfsPath("statvfs", path, s, FillStatvfs, [&](const char* p) { return FS_REAL(statvfs, p, s); });
}
FS_WRAPPER(int, statvfs64, (const char* path, struct statvfs64* s)) {
  static_assert(sizeof(struct statvfs) == sizeof(struct statvfs64));
  return StatfsPath("statvfs64", path, reinterpret_cast<struct statvfs*>(s), FillStatvfs,
                    [&](const char* p) { return FS_REAL(statvfs64, p, s); });
}
FS_WRAPPER(int, fstatfs, (int fd, struct statfs* s)) {
  return StatfsFd("fstatfs", fd, s, FillStatfs, [&] { return FS_REAL(fstatfs, fd, s); });
}
FS_WRAPPER(int, fstatfs64, (int fd, struct statfs64* s)) {
  return StatfsFd("fstatfs64", fd, reinterpret_cast<struct statfs*>(s), FillStatfs,
                  [&] { return FS_REAL(fstatfs64, fd, s); });
}
FS_WRAPPER(int, fstatvfs, (int fd, struct statvfs* s)) {
  return StatfsFd("fstatvfs", fd, s, FillStatvfs, [&] { return FS_REAL(fstatvfs, fd, s); });
}
FS_WRAPPER(int, fstatvfs64, (int fd, struct statvfs64* s)) {
  return StatfsFd("fstatvfs64", fd, reinterpret_cast<struct statvfs*>(s), FillStatvfs,
                  [&] { return FS_REAL(fstatvfs64, fd, s); });
}

// Advice and advisory locks work on the memfd as they do on any file; on a lazy fd advice has nothing to
// do and flock succeeds (each open of an image file is its own file: no other open could conflict).
FS_WRAPPER(int, posix_fadvise, (int fd, off_t offset, off_t len, int advice)) {
  if (lazy::Is(fd)) return (advice < 0 || advice > POSIX_FADV_NOREUSE || len < 0) ? EINVAL : 0;
  int rc = FS_REAL(posix_fadvise, fd, offset, len, advice);
  if (g_log_debug && FdTable::IsOurs(FdTable::Raw(fd))) TraceFd("posix_fadvise", fd, rc ? -1 : 0, rc);
  return rc;
}
FS_WRAPPER(int, posix_fadvise64, (int fd, off64_t offset, off64_t len, int advice)) {
  if (lazy::Is(fd)) return (advice < 0 || advice > POSIX_FADV_NOREUSE || len < 0) ? EINVAL : 0;
  int rc = FS_REAL(posix_fadvise64, fd, offset, len, advice);
  if (g_log_debug && FdTable::IsOurs(FdTable::Raw(fd))) TraceFd("posix_fadvise64", fd, rc ? -1 : 0, rc);
  return rc;
}
FS_WRAPPER(int, flock, (int fd, int op)) {
  if (lazy::Is(fd)) {
    int kind = op & ~LOCK_NB;
    if (kind != LOCK_SH && kind != LOCK_EX && kind != LOCK_UN) {
      errno = EINVAL;
      return -1;
    }
    return 0;
  }
  int rc = FS_REAL(flock, fd, op);
  if (g_log_debug && FdTable::IsOurs(FdTable::Raw(fd))) TraceFd("flock", fd, rc, errno);
  return rc;
}
