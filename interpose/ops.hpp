// Operations on image entries shared by several wrapper files: opening fds, filling stat buffers, checking access.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>

#include "perm.hpp"

namespace fanstore::interpose {

// Opens existing entry `id` for an open()-style call with `flags` and returns a real, tracked kernel fd,
// or -1 with errno, checking in the kernel's order on a read-only mount: O_CREAT|O_EXCL EEXIST;
// O_DIRECTORY on a file ENOTDIR; a directory with O_CREAT, O_TRUNC or write access EISDIR; a file with
// write access or O_TRUNC EROFS (O_CREAT alone opens the existing file). O_PATH opens nothing: an O_PATH
// fd on "/" tracked as the entry (fstat answers, read gives EBADF). Files: Client::OpenFd (a memfd with
// the true bytes); directories: an fd on "/" (O_DIRECTORY, so read() says EISDIR) tracked as the
// directory; a corrupt file EIO.
// `lazy`: a regular file opened read-only gets a lazy fd (lazy.hpp) instead of a memfd, when enabled.
// `check`: a program's open, so read permission is checked for that caller where the kernel checks it (after the
// errors above, not for O_PATH); null for the interposer's own opens (reading a program it execs).
int OpenEntry(uint32_t id, int flags, bool lazy = false, perm::Caller* check = nullptr);

// An O_DIRECTORY fd tracked as directory `id` (for opendir). -1 with errno on failure.
int OpenDirFd(uint32_t id, int flags);

void StatEntry(uint32_t id, struct stat* st);
void StatxEntry(uint32_t id, struct statx* stx);

// access(2) semantics on an entry: W_OK is EROFS; F_OK, R_OK, X_OK as the kernel decides them (perm::Check) with
// the effective ids when `effective`, else the real ones. 0 or an errno.
int AccessEntry(uint32_t id, int mode, bool effective);

}  // namespace fanstore::interpose
