// Entry-level operations behind the wrappers: real fds for files and directories, stat and statx data, access checks.
#include "ops.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "async_io.hpp"
#include "fd_table.hpp"
#include "lazy.hpp"
#include "perm.hpp"
#include "real.hpp"
#include "state.hpp"

namespace fanstore::interpose {

int OpenDirFd(uint32_t id, int flags) {
  // "/" always exists and is a directory, so the fd behaves like one for the kernel (read: EISDIR,
  // fcntl, fstatfs) while everything path-based on it goes through us.
  int fd = FS_REAL(open, "/", O_RDONLY | O_DIRECTORY | (flags & O_CLOEXEC));
  if (fd < 0) return -1;
  if (!FdTable::Track(fd, id)) {
    FS_REAL(close, fd);
    errno = EMFILE;
    return -1;
  }
  return fd;
}

int OpenEntry(uint32_t id, int flags, bool lazy, perm::Caller* check) {
  auto fail = [](int err) {
    errno = err;
    return -1;
  };
  Entry e = g_client->image().Get(id);
  if (flags & O_PATH) {
    // Only O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC count with O_PATH; nothing is read or decoded.
    if ((flags & O_DIRECTORY) && !e.is_dir()) return fail(ENOTDIR);
    int fd = FS_REAL(open, "/", O_PATH | O_DIRECTORY | (flags & O_CLOEXEC));
    if (fd < 0) return -1;
    if (!FdTable::Track(fd, id)) {
      FS_REAL(close, fd);
      return fail(EMFILE);
    }
    return fd;
  }
  // O_TMPFILE names a directory to create in: the lookup (ENOTDIR on a file) comes before the write check, and
  // the kernel's EINVAL for a read-only one before both.
  if ((flags & O_TMPFILE) == O_TMPFILE)
    return fail((flags & O_ACCMODE) == O_RDONLY ? EINVAL : e.is_dir() ? EROFS : ENOTDIR);
  if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL)) return fail(EEXIST);
  if (e.is_link()) return fail(ELOOP);  // reached only with O_NOFOLLOW: Classify followed the others
  bool writes = (flags & O_ACCMODE) != O_RDONLY;
  if (e.is_dir()) {
    if (writes || (flags & (O_CREAT | O_TRUNC))) return fail(EISDIR);
    if (check) {
      if (int err = perm::CheckEntry(e, perm::kRead, *check); err != 0) return fail(err);
    }
    return OpenDirFd(id, flags);
  }
  if (flags & O_DIRECTORY) return fail(ENOTDIR);
  if (writes || (flags & O_TRUNC)) return fail(EROFS);
  if (check) {
    if (int err = perm::CheckEntry(e, perm::kRead, *check); err != 0) return fail(err);
  }
  if (lazy && lazy::Enabled() && !async_io::Eager()) {
    // The first chunk is verified now (EIO at open for a damaged small file); reads decode what they touch.
    Result<std::shared_ptr<OpenFile>> file = [&]() -> Result<std::shared_ptr<OpenFile>> {
      try {
        return g_client->Open(id);
      } catch (const std::bad_alloc&) {
        return Status(Code::kNoMemory, "out of memory");
      } catch (...) {
        return Status(Code::kIoError, "unexpected exception");
      }
    }();
    if (!file.ok()) return fail(ToErrno(file.status()));
    int fd = lazy::Open(id, std::move(file).value(), flags);
    // Another thread may have set up async I/O meanwhile (async_io::Enter pairs with this fence).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (fd >= 0 && async_io::Eager() && lazy::Materialize(fd) != 0) {
      int err = errno;
      FdTable::Clear(fd);
      lazy::Forget(fd);
      FS_REAL(close, fd);
      return fail(err);
    }
    return fd;
  }
  Result<int> fd = [&]() -> Result<int> {
    try {
      return g_client->OpenFd(id, flags & O_CLOEXEC);
    } catch (const std::bad_alloc&) {
      return Status(Code::kNoMemory, "out of memory");
    } catch (...) {
      return Status(Code::kIoError, "unexpected exception");
    }
  }();
  if (!fd.ok()) {
    errno = ToErrno(fd.status());
    return -1;
  }
  if (!FdTable::Track(*fd, id)) {
    FS_REAL(close, *fd);
    errno = EMFILE;
    return -1;
  }
  // The reopen carries no status flags: give the fd those open() asked for, as the kernel would.
  if (int status = flags & (O_APPEND | O_NONBLOCK | O_NOATIME)) FS_REAL(fcntl, *fd, F_SETFL, status);
  return *fd;
}

void StatEntry(uint32_t id, struct stat* st) { g_client->FillStat(id, st); }

void StatxEntry(uint32_t id, struct statx* stx) {
  struct stat st;
  g_client->FillStat(id, &st);
  std::memset(stx, 0, sizeof *stx);
  stx->stx_mask = STATX_BASIC_STATS;
  stx->stx_blksize = static_cast<uint32_t>(st.st_blksize);
  stx->stx_nlink = static_cast<uint32_t>(st.st_nlink);
  stx->stx_uid = st.st_uid;
  stx->stx_gid = st.st_gid;
  stx->stx_mode = static_cast<uint16_t>(st.st_mode);
  stx->stx_ino = st.st_ino;
  stx->stx_size = static_cast<uint64_t>(st.st_size);
  stx->stx_blocks = static_cast<uint64_t>(st.st_blocks);
  auto ts = [](const struct timespec& t) {
    struct statx_timestamp s {};
    s.tv_sec = t.tv_sec;
    s.tv_nsec = static_cast<uint32_t>(t.tv_nsec);
    return s;
  };
  stx->stx_atime = ts(st.st_atim);
  stx->stx_ctime = ts(st.st_ctim);
  stx->stx_mtime = ts(st.st_mtim);
  stx->stx_dev_major = major(st.st_dev);
  stx->stx_dev_minor = minor(st.st_dev);
  stx->stx_attributes_mask = STATX_ATTR_IMMUTABLE;
}

int AccessEntry(uint32_t id, int mode, bool effective) {
  if (mode & W_OK) return EROFS;
  if (mode == F_OK) return 0;
  // The kernel decides with the entry's owner and mode as stat reports them (Client::FillStat: the packed owner,
  // or the caller for a version-2 image), with the real ids unless AT_EACCESS asks for the effective ones.
  int want = ((mode & R_OK) ? perm::kRead : 0) | ((mode & X_OK) ? perm::kExec : 0);
  perm::RealIdsScope real(!effective);
  return perm::CheckEntry(id, want);
}

}  // namespace fanstore::interpose
