// An fd number together with the identity of the open file it named when we got it. The host program may close
// our fd behind our back (a close-all loop the interposer could not see, a raw close_range syscall) and get the
// number again for its own file or socket: before reusing, reading or closing a number, check it still names
// that file. One helper for the client's memfds, the daemon connection, partitions and the node chunk cache.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

namespace fanstore {

// Whether `fd` names the file (dev, ino).
inline bool NamesFile(int fd, dev_t dev, ino_t ino) {
  struct stat st;
  return fd >= 0 && ::fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
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
