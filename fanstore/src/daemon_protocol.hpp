// The client's socket I/O for the client <-> daemon protocol: deadline-bounded sends and receives with fd passing.
// MPI-free. Brings in the wire format (daemon_wire.hpp) and the clock and payload memfds the daemon shares
// (payload_memfd.hpp).
#pragma once

#include <cstdint>

#include "fanstore/protocol/daemon_wire.hpp"
#include "fanstore/protocol/payload_memfd.hpp"
#include "fanstore/status.hpp"

namespace fanstore::daemon_proto {

// poll bounds every wait (fd blocking or not): kTimeout past the deadline, kIoError when the peer is gone.
// RecvAll also collects at most one SCM_RIGHTS fd into *fd_out (-1 if none; the caller closes it), and retries the
// non-blocking receive for up to `spin_us` before its first poll (a busy daemon answers within microseconds).
Status SendAll(int fd, const void* p, size_t n, int64_t deadline_ms);
Status RecvAll(int fd, void* p, size_t n, int64_t deadline_ms, int* fd_out, int spin_us = 0);

}  // namespace fanstore::daemon_proto
