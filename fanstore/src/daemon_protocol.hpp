// Socket I/O for the client <-> daemon protocol (fanstore/protocol/include/fanstore/protocol/daemon_wire.hpp):
// deadline-bounded sends and receives with fd passing, and the sealed memfds that carry payloads. MPI-free.
#pragma once

#include <cstdint>

#include "fanstore/protocol/daemon_wire.hpp"
#include "fanstore/status.hpp"

namespace fanstore::daemon_proto {

// Milliseconds (microseconds) on CLOCK_MONOTONIC; deadlines are absolute values of it.
int64_t NowMs();
int64_t NowUs();

// Blocking-with-deadline socket I/O for the client side (fd may be blocking or not; poll bounds every wait).
// SendAll: kTimeout past the deadline, kIoError when the peer is gone. RecvAll additionally collects at most
// one SCM_RIGHTS fd into *fd_out (-1 if none; the caller closes it). `spin_us`: before the first blocking poll,
// retry the non-blocking receive for up to this long (a reply from a busy daemon is often microseconds away,
// and a sleeping thread takes tens of microseconds to wake).
Status SendAll(int fd, const void* p, size_t n, int64_t deadline_ms);
Status RecvAll(int fd, void* p, size_t n, int64_t deadline_ms, int* fd_out, int spin_us = 0);

// Creates a memfd of `n` bytes mapped read-write at *map (caller munmaps). MFD_CLOEXEC; its size is sealed
// (F_SEAL_SHRINK | F_SEAL_GROW), so a client that maps it can never fault past a truncated end (SIGBUS).
Status CreatePayloadMemfd(uint64_t n, int* fd, void** map);

}  // namespace fanstore::daemon_proto
