// fd identity: a number the kernel hands the program is the program's, whatever we tracked under it before.
#pragma once

#include "fd_table.hpp"
#include "state.hpp"

namespace fanstore::interpose::fd_identity {

void ReusedSlow(int fd);

// The kernel just returned `fd` to the program from a call we passed to libc (open of a real file, pipe,
// socket, accept, memfd_create, ...): if we still tracked that number, our fd was closed behind our back
// (a raw close or close_range syscall) and the tracking is stale -- forget it, so the new file is never
// answered from the image. One load when the number was never ours. Our own (Client) calls are skipped:
// they mark their fds internal afterwards.
inline void Reused(int fd) {
  if (__builtin_expect(FdTable::Raw(fd) != 0, 0) && !t_inside) ReusedSlow(fd);
}

}  // namespace fanstore::interpose::fd_identity
