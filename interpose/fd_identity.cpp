// Forgetting stale tracking of fd numbers that were closed behind our back and handed out again.
#include "fd_identity.hpp"

#include "lazy.hpp"

namespace fanstore::interpose::fd_identity {

void ReusedSlow(int fd) {
  uint32_t raw = FdTable::Raw(fd);
  // An internal fd of ours lost this way: the lazy-fd placeholder is replaced; the Client's own fds
  // (partitions, cached memfds) check their identity where they use them.
  if (raw == FdTable::kInternal) lazy::PlaceholderLost(fd);
  FdTable::Clear(fd);
  lazy::Forget(fd);
}

}  // namespace fanstore::interpose::fd_identity
