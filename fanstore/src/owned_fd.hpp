// An fd number together with the identity of the open file it named when we got it. The host program may close
// our fd behind our back (a close-all loop the interposer could not see, a raw close_range syscall) and get the
// number again for its own file or socket: before reusing, reading or closing a number, check it still names
// that file. One helper for the client's memfds, the daemon connection, partitions and the node chunk cache.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>

namespace fanstore {

// Whether `fd` names the file (dev, ino).
inline bool NamesFile(int fd, dev_t dev, ino_t ino) {
  struct stat st;
  return fd >= 0 && ::fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

// `fd` (close-on-exec) moved above the numbers a program's own files get (select(2) takes fds below 1024 only), or
// left where it is when the open-file limit leaves no room up there.
inline int MoveAboveProgramFds(int fd) {
  const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 1024);
  if (high < 0) return fd;
  ::close(fd);
  return high;
}

// How many fds a cache of at most `most` may keep open for later: 1/`share` of the soft open-file limit, so that a
// program that opens many files itself meets EMFILE (almost) where it would without us.
inline size_t KeptFdCap(size_t most, size_t share) {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return most;
  return std::min<size_t>(most, rl.rlim_cur / share);
}

struct OwnedFd {
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;

  // Records what `number` names now; false (and unchanged) when it names nothing.
  bool Identify(int number) {
    struct stat st;
    if (::fstat(number, &st) != 0) return false;
    fd = number;
    dev = st.st_dev;
    ino = st.st_ino;
    return true;
  }
  bool StillOurs() const { return NamesFile(fd, dev, ino); }
  // Closes fd only when it still names our file; otherwise the number is someone else's now: leave it.
  void CloseIfOurs() const {
    if (StillOurs()) ::close(fd);
  }
};

}  // namespace fanstore
