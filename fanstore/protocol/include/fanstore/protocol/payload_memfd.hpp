// What both sides of the client <-> daemon socket use besides the wire format: the monotonic clock
// their deadlines and hot windows are measured on, and the sealed memfds that carry payloads.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "fanstore/status.hpp"

namespace fanstore::daemon_proto {

// Microseconds (milliseconds) on CLOCK_MONOTONIC; deadlines are absolute values of it.
inline int64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}
inline int64_t NowMs() { return NowUs() / 1000; }

// Creates a memfd of `n` bytes mapped read-write at *map (caller munmaps). MFD_CLOEXEC; its size is sealed
// (F_SEAL_SHRINK | F_SEAL_GROW), so a client that maps it can never fault past a truncated end (SIGBUS).
inline Status CreatePayloadMemfd(uint64_t n, int* fd, void** map) {
  const int m = memfd_create("fanstore-payload", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m < 0) return Status::FromErrno(errno, "memfd_create for a payload");
  auto fail = [m](const char* what) {
    const int err = errno;
    close(m);
    return Status::FromErrno(err, what);
  };
  if (ftruncate(m, static_cast<off_t>(n)) != 0) return fail("ftruncate of a payload memfd");
  // Clients check for F_SEAL_SHRINK before mapping: the size they validated cannot change under them.
  if (fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) return fail("sealing the size of a payload memfd");
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
  if (p == MAP_FAILED) return fail("mmap of a payload memfd");
  *fd = m;
  *map = p;
  return Status::Ok();
}

}  // namespace fanstore::daemon_proto
