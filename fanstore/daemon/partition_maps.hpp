// Read-only mappings of the partitions staged on this rank, so that a peer's range is sent straight from the page
// cache: one copy into the asking daemon instead of two (docs/performance.md, "Why the daemon is built as it is").
// A mapping read past the file's end faults (SIGBUS) and a staged copy may be truncated under us, so each mapping
// is guarded by a read lease: a writer breaks it, the partition is sent by pread from the next CheckLeases on, and
// the lease goes back once no send from the mapping is in flight (docs/daemon.md, "Protocols"). Only node-local
// file systems are mapped: a lease holds back this node's writers only. Single-threaded: the progress thread makes
// every call (the lease signal's handler only counts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fanstore/image.hpp"

namespace fanstore::daemon {

class PartitionMaps {
 public:
  // Maps nothing yet (Map does, once a partition is staged: a file of an earlier run at its path may hold other
  // bytes). `break_grace_ms`: how long a send from a retired mapping may stay in flight before its pages are
  // replaced (-1: half the kernel's lease-break time).
  explicit PartitionMaps(const Image& img, int64_t break_grace_ms = -1);
  ~PartitionMaps();
  PartitionMaps(const PartitionMaps&) = delete;
  PartitionMaps& operator=(const PartitionMaps&) = delete;

  // Maps partition `part` (under the image's partition_dir), if it qualifies and is not mapped yet: staging calls
  // it when a partition is complete under its final name (and no fd of ours writes it any more). Progress thread.
  void Map(uint32_t part);
  // Bytes [offset, offset + n) of partition `part` in its mapping, held for a send until Unpin(part); null when the
  // partition is not mapped (or no longer: its lease was broken, or mapped sends were turned off) or the range is
  // not inside the file as mapped.
  const char* Pin(uint32_t part, uint64_t offset, uint64_t n);
  void Unpin(uint32_t part);
  // Notices broken leases and acts on them (cheap when nothing happened: an atomic load and a clock read); call it
  // every progress step, before the step's Pins (Pin does not look at the leases itself).
  void CheckLeases();
  // No more sends from any mapping, now or of partitions staged later (the transport could not send from one);
  // leases go back as sends drain.
  void TurnOff();

  size_t mapped() const;  // partitions sent from their mapping now

 private:
  struct Part {
    std::string path;
    int fd = -1;
    char* base = nullptr;
    uint64_t size = 0;
    bool usable = false;  // lease held and not broken
    bool leased = false;  // lease still ours (given back once broken and no send is in flight)
    uint64_t in_flight = 0;
    int64_t broken_ms = 0;  // when the break was noticed (0: not broken)
  };
  void Retire(uint32_t i, const char* why);
  void GiveBackIfIdle(Part& p, int64_t now_ms);
  std::vector<Part> parts_;   // by partition id
  uint64_t seen_breaks_ = 0;  // lease-break signals already looked into
  int64_t polled_ms_ = 0;     // when every lease was last asked about
  int64_t break_grace_ms_;    // sends from a retired mapping in flight longer than this read zeros
  size_t retired_held_ = 0;   // partitions broken whose lease is still ours (their deadline is watched)
  bool off_ = false;          // TurnOff: Map maps nothing more
};

}  // namespace fanstore::daemon
