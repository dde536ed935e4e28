// Calls that hand the program a new fd number (pipe, socket, accept, memfd_create, ...): the number is the
// program's, so any stale tracking of it (our fd closed behind our back by a raw syscall) is dropped.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "fd_identity.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {
inline int Fresh(int fd) {
  if (fd >= 0) fd_identity::Reused(fd);
  return fd;
}
inline int FreshPair(int rc, const int fds[2]) {
  if (rc == 0) {
    fd_identity::Reused(fds[0]);
    fd_identity::Reused(fds[1]);
  }
  return rc;
}
}  // namespace

FS_WRAPPER(int, pipe, (int fds[2])) { return FreshPair(FS_REAL(pipe, fds), fds); }
FS_WRAPPER(int, pipe2, (int fds[2], int flags)) { return FreshPair(FS_REAL(pipe2, fds, flags), fds); }
FS_WRAPPER(int, socket, (int domain, int type, int protocol)) { return Fresh(FS_REAL(socket, domain, type, protocol)); }
FS_WRAPPER(int, socketpair, (int domain, int type, int protocol, int sv[2])) {
  return FreshPair(FS_REAL(socketpair, domain, type, protocol, sv), sv);
}
FS_WRAPPER(int, accept, (int fd, struct sockaddr* addr, socklen_t* len)) {
  return Fresh(FS_REAL(accept, fd, addr, len));
}
FS_WRAPPER(int, accept4, (int fd, struct sockaddr* addr, socklen_t* len, int flags)) {
  return Fresh(FS_REAL(accept4, fd, addr, len, flags));
}
FS_WRAPPER(int, memfd_create, (const char* name, unsigned int flags)) {
  return Fresh(FS_REAL(memfd_create, name, flags));
}
FS_WRAPPER(int, eventfd, (unsigned int count, int flags)) { return Fresh(FS_REAL(eventfd, count, flags)); }
FS_WRAPPER(int, epoll_create, (int size)) { return Fresh(FS_REAL(epoll_create, size)); }
FS_WRAPPER(int, epoll_create1, (int flags)) { return Fresh(FS_REAL(epoll_create1, flags)); }
FS_WRAPPER(int, timerfd_create, (int clockid, int flags)) { return Fresh(FS_REAL(timerfd_create, clockid, flags)); }
FS_WRAPPER(int, signalfd, (int fd, const sigset_t* mask, int flags)) {
  return Fresh(FS_REAL(signalfd, fd, mask, flags));
}
FS_WRAPPER(int, inotify_init, ()) { return Fresh(FS_REAL(inotify_init)); }
FS_WRAPPER(int, inotify_init1, (int flags)) { return Fresh(FS_REAL(inotify_init1, flags)); }
FS_WRAPPER(int, fanotify_init, (unsigned int flags, unsigned int event_flags)) {
  return Fresh(FS_REAL(fanotify_init, flags, event_flags));
}
FS_WRAPPER(int, posix_openpt, (int flags)) { return Fresh(FS_REAL(posix_openpt, flags)); }
FS_WRAPPER(int, shm_open, (const char* name, int oflag, mode_t mode)) {
  return Fresh(FS_REAL(shm_open, name, oflag, mode));
}
FS_WRAPPER(int, open_by_handle_at, (int mount_fd, struct file_handle* handle, int flags)) {
  return Fresh(FS_REAL(open_by_handle_at, mount_fd, handle, flags));
}

// fds passed over a Unix socket (SCM_RIGHTS) are new numbers too.
FS_WRAPPER(ssize_t, recvmsg, (int fd, struct msghdr* msg, int flags)) {
  ssize_t rc = FS_REAL(recvmsg, fd, msg, flags);
  if (rc >= 0 && msg != nullptr && msg->msg_controllen != 0 && FdTable::HighWater() != 0) {
    for (struct cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const unsigned char* data = CMSG_DATA(c);
      for (size_t i = 0; i < n; ++i) {
        int got;
        memcpy(&got, data + i * sizeof(int), sizeof got);
        fd_identity::Reused(got);
      }
    }
  }
  return rc;
}
