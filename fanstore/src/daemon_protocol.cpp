// Deadline-bounded socket I/O with fd passing for the client<->daemon protocol.
#include "daemon_protocol.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fanstore::daemon_proto {

namespace {

// Waits until fd is ready for `events` or the deadline passes. kTimeout / kIoError (peer hung up) / ok.
Status WaitReady(int fd, short events, int64_t deadline_ms, const char* what) {
  for (;;) {
    int64_t left = deadline_ms - NowMs();
    if (left <= 0) return Status(Code::kTimeout, std::string("daemon socket: timed out ") + what);
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, static_cast<int>(left > 1000000 ? 1000000 : left));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, std::string("daemon socket: poll while ") + what);
    }
    if (p.revents & events) return Status::Ok();
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
      return Status(Code::kIoError, std::string("daemon socket closed while ") + what);
  }
}

}  // namespace

Status SendAll(int fd, const void* p, size_t n, int64_t deadline_ms) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        Status s = WaitReady(fd, POLLOUT, deadline_ms, "sending a request");
        if (!s.ok()) return s;
        continue;
      }
      return Status(Code::kIoError, std::string("daemon socket: send: ") + std::strerror(errno));
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* p, size_t n, int64_t deadline_ms, int* fd_out, int spin_us) {
  char* c = static_cast<char*>(p);
  int64_t spin_until = spin_us > 0 ? NowUs() + spin_us : 0;
  while (n > 0) {
    iovec iov{c, n};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    ssize_t r = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (spin_until && NowUs() < spin_until) {
          sched_yield();
          continue;
        }
        spin_until = 0;
        Status s = WaitReady(fd, POLLIN, deadline_ms, "waiting for the daemon's reply");
        if (!s.ok()) return s;
        continue;
      }
      return Status(Code::kIoError, std::string("daemon socket: recv: ") + std::strerror(errno));
    }
    if (r == 0) return Status(Code::kIoError, "daemon closed the connection (did it exit?)");
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      // Only one fd is ever expected; close any others (the buffer holds two ints, and one message may carry both).
      const size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int got;
        std::memcpy(&got, CMSG_DATA(cm) + i * sizeof got, sizeof got);
        if (fd_out && *fd_out < 0) *fd_out = got;
        else close(got);
      }
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

}  // namespace fanstore::daemon_proto
