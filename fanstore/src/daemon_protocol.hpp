// The client's socket I/O for the client <-> daemon protocol (fanstore/protocol/include/fanstore/protocol/
// daemon_wire.hpp): deadline-bounded sends and receives with fd passing. MPI-free. The clock and the payload
// memfds, which the daemon uses too, are in fanstore/protocol/include/fanstore/protocol/payload_memfd.hpp.
#pragma once

#include <cstdint>

#include "fanstore/protocol/daemon_wire.hpp"
#include "fanstore/protocol/payload_memfd.hpp"
#include "fanstore/status.hpp"

namespace fanstore::daemon_proto {

// Blocking-with-deadline socket I/O for the client side (fd may be blocking or not; poll bounds every wait).
// SendAll: kTimeout past the deadline, kIoError when the peer is gone. RecvAll additionally collects at most
// one SCM_RIGHTS fd into *fd_out (-1 if none; the caller closes it). `spin_us`: before the first blocking poll,
// retry the non-blocking receive for up to this long (a reply from a busy daemon is often microseconds away,
// and a sleeping thread takes tens of microseconds to wake).
Status SendAll(int fd, const void* p, size_t n, int64_t deadline_ms);
Status RecvAll(int fd, void* p, size_t n, int64_t deadline_ms, int* fd_out, int spin_us = 0);

}  // namespace fanstore::daemon_proto
