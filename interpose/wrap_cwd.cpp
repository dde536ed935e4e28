// chdir/fchdir/getcwd: a virtual cwd inside the mount; the kernel's cwd is left where it was.
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cwd.hpp"
#include "fd_table.hpp"
#include "perm.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

// getcwd with the virtual cwd: POSIX buffer rules, and glibc's extension of allocating when buf is NULL.
char* CopyCwd(const std::string& v, char* buf, size_t size) {
  if (buf == nullptr) {
    size_t need = v.size() + 1;
    if (size != 0 && size < need) {
      errno = ERANGE;
      return nullptr;
    }
    char* out = static_cast<char*>(malloc(size > need ? size : need));
    if (out == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
    memcpy(out, v.c_str(), need);
    return out;
  }
  if (size == 0) {
    errno = EINVAL;
    return nullptr;
  }
  if (size < v.size() + 1) {
    errno = ERANGE;
    return nullptr;
  }
  memcpy(buf, v.c_str(), v.size() + 1);
  return buf;
}

// Reads the virtual cwd, if any, with the exception boundary.
bool VirtualCwd(std::string* v) {
  if (!Active() || !cwd::HasVirtual()) return false;
  return Serve([&] { return cwd::Virtual(v); }, false);
}

}  // namespace

FS_WRAPPER(int, chdir, (const char* path)) {
  if (!Active()) return FS_REAL(chdir, path);
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) {
    int rc = FS_REAL(chdir, r.PassPath(path));
    // Leaving the mount (or moving around outside it) clears the virtual cwd and refreshes the cached real one.
    if (rc == 0) {
      int saved = errno;
      Serve(
          [] {
            cwd::LeftMount();
            return 0;
          },
          0);
      errno = saved;
    }
    return rc;
  }
  return ServePath("chdir", r, path, [&](uint32_t id) {
    const fanstore::Entry e = g_client->image().Get(id);
    if (!e.is_dir()) return ENOTDIR;
    perm::Caller who;
    if (int err = perm::CheckEntry(e, perm::kExec, who); err != 0) return err;  // as the kernel's chdir
    cwd::SetVirtual(AbsoluteOf(r.rel));
    return 0;
  });
}

FS_WRAPPER(int, fchdir, (int fd)) {
  uint32_t id;
  if (!Active()) return FS_REAL(fchdir, fd);
  if (!FdTable::Lookup(fd, &id)) {
    int rc = FS_REAL(fchdir, fd);
    if (rc == 0) {  // out of the mount, or around outside it: drop the virtual cwd, refresh the cached real one
      int saved = errno;
      Serve(
          [] {
            cwd::LeftMount();
            return 0;
          },
          0);
      errno = saved;
    }
    return rc;
  }
  int saved = errno;
  int err = Serve(
      [&] {
        const fanstore::Entry e = g_client->image().Get(id);
        if (!e.is_dir()) return ENOTDIR;
        perm::Caller who;
        if (int err = perm::CheckEntry(e, perm::kExec, who); err != 0) return err;  // fchdir checks it too
        cwd::SetVirtual(AbsoluteOfId(id));
        return 0;
      },
      ENOMEM);
  TraceFd("fchdir", fd, err ? -1 : 0, err);
  errno = err ? err : saved;
  return err ? -1 : 0;
}

FS_WRAPPER(char*, getcwd, (char* buf, size_t size)) {
  std::string v;
  if (!VirtualCwd(&v)) return FS_REAL(getcwd, buf, size);
  return CopyCwd(v, buf, size);
}

FS_WRAPPER(char*, __getcwd_chk, (char* buf, size_t size, size_t buflen)) {
  std::string v;
  if (!VirtualCwd(&v)) return FS_REAL(__getcwd_chk, buf, size, buflen);
  if (size > buflen) abort();  // what the fortified libc version does on a lying size
  return CopyCwd(v, buf, size);
}

FS_WRAPPER(char*, get_current_dir_name, ()) {
  std::string v;
  if (!VirtualCwd(&v)) return FS_REAL(get_current_dir_name);
  return strdup(v.c_str());
}
