// Unix socket names under the mount: bind creates a file there (EROFS, as on a read-only file system, never a
// socket in a real directory behind the prefix); connect and sendto look one up (the image holds no sockets).
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

// The file name of an AF_UNIX address (not an abstract or unnamed one), NUL-terminated in `buf` as the
// kernel reads it (sun_path need not be terminated within addrlen). False for any other address.
bool UnixPath(const struct sockaddr* addr, socklen_t len, char (&buf)[sizeof(sockaddr_un::sun_path) + 1]) {
  constexpr size_t kPathAt = offsetof(struct sockaddr_un, sun_path);
  if (addr == nullptr || len <= kPathAt || addr->sa_family != AF_UNIX) return false;
  const auto* un = reinterpret_cast<const struct sockaddr_un*>(addr);
  size_t n = len - kPathAt;
  if (n > sizeof un->sun_path) n = sizeof un->sun_path;
  if (un->sun_path[0] == '\0') return false;  // abstract namespace: no file
  memcpy(buf, un->sun_path, n);
  buf[n] = '\0';
  return true;
}

// connect/sendto to a name under the mount: the lookup's ENOENT/ENOTDIR, else EROFS -- the kernel asks for
// write permission on the socket file before it checks the type, which a read-only file system refuses for
// files and directories, the only entries an image has. 0 when the name is not ours.
int LookupErrno(const char* call, const struct sockaddr* addr, socklen_t len) {
  char path[sizeof(sockaddr_un::sun_path) + 1];
  if (!Active() || !UnixPath(addr, len, path)) return 0;
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) return 0;  // (a rewritten path would name the same file: the kernel resolves the original)
  int err = Serve(
      [&] {
        LookUp(&r);
        return r.kind == Resolved::kFail ? r.err : EROFS;
      },
      ENOMEM);
  TraceCall(call, path, -1, err);
  return err;
}

}  // namespace

FS_WRAPPER(int, bind, (int fd, const struct sockaddr* addr, socklen_t len)) {
  char path[sizeof(sockaddr_un::sun_path) + 1];
  if (!Active() || !UnixPath(addr, len, path)) return FS_REAL(bind, fd, addr, len);
  Resolved r = SafeClassify(AT_FDCWD, path);
  if (r.pass()) return FS_REAL(bind, fd, addr, len);
  // The kernel creates the name (filename_create): an existing one is EADDRINUSE.
  int err = Serve([&] { return CreateErrno(r); }, ENOMEM);
  if (err == EEXIST) err = EADDRINUSE;
  TraceCall("bind", path, -1, err);
  errno = err;
  return -1;
}

FS_WRAPPER(int, connect, (int fd, const struct sockaddr* addr, socklen_t len)) {
  if (int err = LookupErrno("connect", addr, len); err != 0) {
    errno = err;
    return -1;
  }
  return FS_REAL(connect, fd, addr, len);
}

FS_WRAPPER(ssize_t, sendto,
           (int fd, const void* buf, size_t n, int flags, const struct sockaddr* addr, socklen_t len)) {
  if (addr != nullptr) {
    if (int err = LookupErrno("sendto", addr, len); err != 0) {
      errno = err;
      return -1;
    }
  }
  return FS_REAL(sendto, fd, buf, n, flags, addr, len);
}
