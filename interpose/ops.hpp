// Operations on image entries shared by several wrapper files: opening fds, filling stat buffers, checking access.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>

namespace fanstore::interpose {

// Opens entry `id` for an open()-style call with `flags` and returns a real, tracked kernel fd, or
// -1 with errno. Files: Client::OpenFd (a memfd with the true bytes). Directories: an fd on "/"
// (O_DIRECTORY, so read() says EISDIR) tracked as the directory. Write flags give EROFS,
// O_DIRECTORY on a file ENOTDIR, a corrupt file EIO.
int OpenEntry(uint32_t id, int flags);

// An O_DIRECTORY fd tracked as directory `id` (for opendir). -1 with errno on failure.
int OpenDirFd(uint32_t id, int flags);

void StatEntry(uint32_t id, struct stat* st);
void StatxEntry(uint32_t id, struct statx* stx);

// access(2) semantics on an entry: F_OK, R_OK, X_OK by mode bits; W_OK is EROFS. 0 or an errno.
int AccessEntry(uint32_t id, int mode, bool effective);

// True when flags ask for anything but reading an existing file.
inline bool WantsWrite(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)) != 0 ||
         (flags & O_TMPFILE) == O_TMPFILE;
}

}  // namespace fanstore::interpose
