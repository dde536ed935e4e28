// Read-only mappings of the partitions staged on this rank, so that a peer's range is sent straight from the page
// cache: Open MPI's shared-memory transport then copies it once, into the asking daemon (the receiver reads our
// pages), instead of a pread into a send buffer first. Measured with bench_remote, 4 daemons on one machine: a
// 4 MiB fetch took 639 us instead of 1,313 us.
//
// A mapping must never be read past the file's end (SIGBUS), and a staged copy may be truncated under us (a
// user, a script). So each mapping is guarded by a read lease (fcntl F_SETLEASE): whoever opens the file for
// writing or truncates it breaks the lease, the kernel signals this process and holds the writer back. From the
// next CheckLeases on, that partition is never sent from its mapping again (Pin says no: the caller preads, which
// reports a short file as an error reply), and the lease is given back as soon as no send from the mapping is in
// flight, which lets the writer go on. A send to a peer that died in flight never completes: the writer then
// waits for the kernel's lease-break time (/proc/sys/fs/lease-break-time, 45 s by default) and goes on.
// A partition whose lease cannot be taken (a file system without leases, a file we do not own) is not mapped.
//
// Single-threaded: the daemon's progress thread makes every call (the lease signal's handler only sets a flag).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fanstore/image.hpp"

namespace fanstore::daemon {

class PartitionMaps {
 public:
  // Maps every partition `img` has staged here whose lease can be taken.
  explicit PartitionMaps(const Image& img);
  ~PartitionMaps();
  PartitionMaps(const PartitionMaps&) = delete;
  PartitionMaps& operator=(const PartitionMaps&) = delete;

  // Bytes [offset, offset + n) of partition `part` in its mapping, held for a send until Unpin(part); null when the
  // partition is not mapped (or no longer: its lease was broken) or the range is not inside the file as mapped.
  const char* Pin(uint32_t part, uint64_t offset, uint64_t n);
  void Unpin(uint32_t part);
  // Notices broken leases (cheap when no signal came: one atomic load); call it every progress step.
  void CheckLeases();

  size_t mapped() const;  // partitions sent from their mapping now

 private:
  struct Part {
    int fd = -1;
    const char* base = nullptr;
    uint64_t size = 0;
    bool usable = false;    // lease held and not broken
    bool leased = false;    // lease still ours (given back once broken and no send is in flight)
    uint64_t in_flight = 0;
  };
  void GiveBackIfIdle(Part& p);
  std::vector<Part> parts_;
  uint64_t seen_breaks_ = 0;  // lease-break signals already looked into
};

}  // namespace fanstore::daemon
