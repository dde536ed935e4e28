// Directory streams: opendir/fdopendir return our own DIR (an OurDir), recognised by the registry in every call.
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ancestors.hpp"
#include "dir_registry.hpp"
#include "fd_table.hpp"
#include "ops.hpp"
#include "parent_listing.hpp"
#include "perm.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

static_assert(sizeof(struct dirent) == sizeof(struct dirent64), "readdir and readdir64 share one buffer");

namespace {

using Filter = int (*)(const struct dirent*);
using Compar = int (*)(const struct dirent**, const struct dirent**);

// A new OurDir over a tracked directory fd that the stream now owns.
DIR* WrapFd(int fd, uint32_t id) {
  OurDir* d = dirs::Create(fd, id);
  if (d == nullptr) return nullptr;
  g_client->stats().readdirs.fetch_add(1, std::memory_order_relaxed);
  return reinterpret_cast<DIR*>(d);
}

DIR* OpenOurDir(const char* call, int dirfd, const char* path, const Resolved& classified) {
  int saved = errno;
  DIR* out = nullptr;
  int rc = ServePath(call, classified, path, [&](uint32_t id) {
    const fanstore::Entry e = g_client->image().Get(id);
    if (!e.is_dir()) return ENOTDIR;
    perm::Caller who;
    if (int err = perm::CheckEntry(e, perm::kRead, who); err != 0) return err;  // opendir opens it for reading
    int fd = OpenDirFd(id, O_CLOEXEC);
    if (fd < 0) return errno;
    out = WrapFd(fd, id);
    if (out == nullptr) {
      int err = errno;
      FdTable::Clear(fd);
      FS_REAL(close, fd);
      return err;
    }
    return 0;
  });
  (void)dirfd;
  if (rc == 0) errno = saved;
  return rc == 0 ? out : nullptr;
}

// scandir over a directory stream whose entries come from `next` (true + *ent, or false at the end; -1 on
// failure). Only `next` runs inside the reentrancy guard: the caller's filter and compar run as ordinary
// program code, so the calls they make (stat of an entry under the mount, an open whose fd they keep) are
// served and tracked like any other.
template <class Next>
int Scan(Next next, struct dirent*** namelist, Filter filter, Compar compar) {
  size_t n = 0, cap = 0;
  struct dirent** list = nullptr;
  struct dirent64 ent;
  int err = 0;
  for (;;) {
    int got = next(&ent);
    if (got < 0) {
      err = ENOMEM;
      break;
    }
    if (got == 0) break;
    const struct dirent* e = reinterpret_cast<const struct dirent*>(&ent);
    if (filter != nullptr && filter(e) == 0) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      auto* grown = static_cast<struct dirent**>(realloc(list, cap * sizeof *list));
      if (grown == nullptr) {
        err = ENOMEM;
        break;
      }
      list = grown;
    }
    auto* copy = static_cast<struct dirent*>(malloc(ent.d_reclen));
    if (copy == nullptr) {
      err = ENOMEM;
      break;
    }
    memcpy(copy, &ent, ent.d_reclen);
    list[n++] = copy;
  }
  if (err != 0) {
    for (size_t i = 0; i < n; ++i) free(list[i]);
    free(list);
    errno = err;
    return -1;
  }
  if (compar != nullptr && n > 1)
    qsort(list, n, sizeof *list, reinterpret_cast<int (*)(const void*, const void*)>(compar));
  *namelist = list;
  return static_cast<int>(n);
}

int ScanOurs(OurDir* d, struct dirent*** namelist, Filter filter, Compar compar) {
  auto next = [d](struct dirent64* ent) { return Serve([&] { return dirs::Next(d, ent) ? 1 : 0; }, -1); };
  return Scan(next, namelist, filter, compar);
}

// scandir of the mount's parent, which glibc would read with internal calls that miss the mount's entry:
// read it through the parent-listing stream instead. -1 (errno) like scandir; *handled false: not the parent.
int ScanParent(int dirfd, const char* path, struct dirent*** namelist, Filter filter, Compar compar, bool* handled) {
  *handled = false;
  if (!Ready() || ancestors::DepthOf(dirfd, path) != ancestors::MountDepth() - 1) return 0;
  int fd = FS_REAL(openat, dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;  // libc's scandir reports the error
  FdTable::MarkAncestor(fd, ancestors::MountDepth() - 1);
  DIR* d = FS_REAL(fdopendir, fd);
  if (d == nullptr) {
    FdTable::Clear(fd);
    FS_REAL(close, fd);
    return 0;
  }
  *handled = true;
  parent_listing::Note(d);
  int saved = errno;
  auto next = [d](struct dirent64* ent) {
    bool noted;
    struct dirent64* e = parent_listing::Next(d, &noted);
    if (!noted) e = FS_REAL(readdir64, d);
    if (e == nullptr) return 0;
    memcpy(ent, e, e->d_reclen);
    return 1;
  };
  int n = Scan(next, namelist, filter, compar);
  int err = errno;
  parent_listing::Forget(d);
  FdTable::Clear(fd);
  FS_REAL(closedir, d);
  errno = n < 0 ? err : saved;
  return n;
}

int ScandirCommon(const char* call, int dirfd, const char* path, struct dirent*** namelist, Filter filter,
                  Compar compar, const Resolved& r) {
  DIR* dir = OpenOurDir(call, dirfd, path, r);
  if (dir == nullptr) return -1;
  OurDir* d = reinterpret_cast<OurDir*>(dir);
  int saved = errno;
  int n = ScanOurs(d, namelist, filter, compar);  // not under Serve: it runs the caller's callbacks
  int err = errno;
  FdTable::Clear(d->fd);
  FS_REAL(close, d->fd);
  dirs::Destroy(d);
  errno = n < 0 ? err : saved;
  return n;
}

// readdir_r/readdir64_r on a stream of the mount's parent: libc's entries, then the mount's. False (and
// nothing read) when `dirp` is not such a stream.
template <class Ent>
bool ParentReaddirR(DIR* dirp, Ent* entry, Ent** result, int* err) {
  if (!parent_listing::Any()) return false;
  bool noted;
  int saved = errno;
  struct dirent64* e = parent_listing::Next(dirp, &noted);
  if (!noted) return false;
  *err = e == nullptr && errno != saved ? errno : 0;
  if (e != nullptr) memcpy(entry, e, e->d_reclen);
  *result = e ? entry : nullptr;
  errno = saved;
  return true;
}

}  // namespace

FS_WRAPPER(DIR*, opendir, (const char* path)) {
  if (!Active()) return FS_REAL(opendir, path);
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) {
    DIR* d = FS_REAL(opendir, r.PassPath(path));
    if (d != nullptr) {
      int saved = errno;
      ancestors::NoteOpened(FS_REAL(dirfd, d), AT_FDCWD, r.PassPath(path));
      parent_listing::Note(d);
      errno = saved;
    }
    return d;
  }
  return OpenOurDir("opendir", AT_FDCWD, path, r);
}

FS_WRAPPER(DIR*, fdopendir, (int fd)) {
  uint32_t id;
  if (!FdTable::Lookup(fd, &id) || !Active()) {
    DIR* d = FS_REAL(fdopendir, fd);
    if (d != nullptr && FdTable::IsAncestor(FdTable::Raw(fd))) {
      int saved = errno;
      parent_listing::Note(d);
      errno = saved;
    }
    return d;
  }
  int saved = errno;
  int err = 0;
  DIR* d = Serve(
      [&]() -> DIR* {
        if (!g_client->image().Get(id).is_dir()) {
          err = ENOTDIR;
          return nullptr;
        }
        DIR* w = WrapFd(fd, id);
        if (w == nullptr) err = errno;
        return w;
      },
      static_cast<DIR*>(nullptr));
  TraceFd("fdopendir", fd, d ? 0 : -1, err);
  errno = d ? saved : (err ? err : ENOMEM);
  return d;
}

FS_WRAPPER(struct dirent*, readdir, (DIR * dirp)) {
  OurDir* d = dirs::Find(dirp);
  if (d == nullptr) {
    if (parent_listing::Any()) {
      bool noted;
      struct dirent64* e = parent_listing::Next(dirp, &noted);
      if (noted) return reinterpret_cast<struct dirent*>(e);
    }
    return FS_REAL(readdir, dirp);
  }
  // End of stream leaves errno untouched, as POSIX asks (callers tell EOF from error by it).
  return dirs::Next(d, &d->ent) ? reinterpret_cast<struct dirent*>(&d->ent) : nullptr;
}

FS_WRAPPER(struct dirent64*, readdir64, (DIR * dirp)) {
  OurDir* d = dirs::Find(dirp);
  if (d == nullptr) {
    if (parent_listing::Any()) {
      bool noted;
      struct dirent64* e = parent_listing::Next(dirp, &noted);
      if (noted) return e;
    }
    return FS_REAL(readdir64, dirp);
  }
  return dirs::Next(d, &d->ent) ? &d->ent : nullptr;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
FS_WRAPPER(int, readdir_r, (DIR * dirp, struct dirent* entry, struct dirent** result)) {
  OurDir* d = dirs::Find(dirp);
  if (d == nullptr) {
    int err;
    if (ParentReaddirR(dirp, entry, result, &err)) return err;
    return FS_REAL(readdir_r, dirp, entry, result);
  }
  bool more = dirs::Next(d, reinterpret_cast<struct dirent64*>(entry));
  *result = more ? entry : nullptr;
  return 0;
}

FS_WRAPPER(int, readdir64_r, (DIR * dirp, struct dirent64* entry, struct dirent64** result)) {
  OurDir* d = dirs::Find(dirp);
  if (d == nullptr) {
    int err;
    if (ParentReaddirR(dirp, entry, result, &err)) return err;
    return FS_REAL(readdir64_r, dirp, entry, result);
  }
  bool more = dirs::Next(d, entry);
  *result = more ? entry : nullptr;
  return 0;
}
#pragma GCC diagnostic pop

FS_WRAPPER(int, closedir, (DIR * dirp)) {
  OurDir* d = dirs::Find(dirp);
  if (d == nullptr) {
    // libc closes the stream's fd where no wrapper sees it: forget what we knew about the number.
    if (FdTable::HighWater() != 0) {
      parent_listing::Forget(dirp);
      FdTable::Clear(FS_REAL(dirfd, dirp));
    }
    return FS_REAL(closedir, dirp);
  }
  int fd = d->fd;
  dirs::Destroy(d);
  FdTable::Clear(fd);
  TraceFd("closedir", fd, 0, 0);
  return FS_REAL(close, fd);
}

FS_WRAPPER(int, dirfd, (DIR * dirp)) {
  OurDir* d = dirs::Find(dirp);
  return d ? d->fd : FS_REAL(dirfd, dirp);
}

FS_WRAPPER(void, rewinddir, (DIR * dirp)) {
  OurDir* d = dirs::Find(dirp);
  if (d == nullptr) {
    FS_REAL(rewinddir, dirp);
    if (parent_listing::Any()) parent_listing::Rewound(dirp);
    return;
  }
  d->pos = 0;
}

FS_WRAPPER(void, seekdir, (DIR * dirp, long loc)) {
  OurDir* d = dirs::Find(dirp);
  if (d == nullptr) {
    FS_REAL(seekdir, dirp, loc);
    if (parent_listing::Any()) parent_listing::Sought(dirp, loc);
    return;
  }
  d->pos = loc < 0 ? 0 : loc;  // telldir cookies are plain positions
}

FS_WRAPPER(long, telldir, (DIR * dirp)) {
  OurDir* d = dirs::Find(dirp);
  return d ? d->pos : FS_REAL(telldir, dirp);
}

FS_WRAPPER(int, scandir, (const char* path, struct dirent*** namelist, Filter filter, Compar compar)) {
  if (!Active()) return FS_REAL(scandir, path, namelist, filter, compar);
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) {
    bool handled;
    int n = ScanParent(AT_FDCWD, r.PassPath(path), namelist, filter, compar, &handled);
    return handled ? n : FS_REAL(scandir, r.PassPath(path), namelist, filter, compar);
  }
  return ScandirCommon("scandir", AT_FDCWD, path, namelist, filter, compar, r);
}

using Filter64 = int (*)(const struct dirent64*);
using Compar64 = int (*)(const struct dirent64**, const struct dirent64**);

FS_WRAPPER(int, scandir64, (const char* path, struct dirent64*** namelist, Filter64 filter, Compar64 compar)) {
  if (!Active()) return FS_REAL(scandir64, path, namelist, filter, compar);
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) {
    bool handled;
    int n = ScanParent(AT_FDCWD, r.PassPath(path), reinterpret_cast<struct dirent***>(namelist),
                       reinterpret_cast<Filter>(filter), reinterpret_cast<Compar>(compar), &handled);
    return handled ? n : FS_REAL(scandir64, r.PassPath(path), namelist, filter, compar);
  }
  return ScandirCommon("scandir64", AT_FDCWD, path, reinterpret_cast<struct dirent***>(namelist),
                       reinterpret_cast<Filter>(filter), reinterpret_cast<Compar>(compar), r);
}

FS_WRAPPER(int, scandirat, (int dirfd, const char* path, struct dirent*** namelist, Filter filter, Compar compar)) {
  if (!Active()) return FS_REAL(scandirat, dirfd, path, namelist, filter, compar);
  Resolved r = SafeClassify(dirfd, path);
  if (r.pass()) {
    bool handled;
    int n = ScanParent(r.PassDirfd(dirfd), r.PassPath(path), namelist, filter, compar, &handled);
    return handled ? n : FS_REAL(scandirat, r.PassDirfd(dirfd), r.PassPath(path), namelist, filter, compar);
  }
  return ScandirCommon("scandirat", dirfd, path, namelist, filter, compar, r);
}

FS_WRAPPER(int, scandirat64,
           (int dirfd, const char* path, struct dirent64*** namelist, Filter64 filter, Compar64 compar)) {
  if (!Active()) return FS_REAL(scandirat64, dirfd, path, namelist, filter, compar);
  Resolved r = SafeClassify(dirfd, path);
  if (r.pass()) {
    bool handled;
    int n = ScanParent(r.PassDirfd(dirfd), r.PassPath(path), reinterpret_cast<struct dirent***>(namelist),
                       reinterpret_cast<Filter>(filter), reinterpret_cast<Compar>(compar), &handled);
    return handled ? n : FS_REAL(scandirat64, r.PassDirfd(dirfd), r.PassPath(path), namelist, filter, compar);
  }
  return ScandirCommon("scandirat64", dirfd, path, reinterpret_cast<struct dirent***>(namelist),
                       reinterpret_cast<Filter>(filter), reinterpret_cast<Compar>(compar), r);
}
