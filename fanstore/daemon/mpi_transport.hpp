// Daemon-to-daemon transport: byte ranges of partitions by one MPI request/reply round-trip, many in flight,
// with deadlines, replica failover, dead-peer detection (once per peer, then fail-fast, with a background
// probe) and nonblocking MPI calls only (a peer that dies mid-transfer can never wedge this thread). It also
// answers the other ranks' requests from this rank's staged partitions. Single-threaded: the daemon's progress
// thread makes every call after start-up.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>

#include "byte_range.hpp"
#include "doorbell.hpp"
#include "fanstore/image.hpp"
#include "fanstore/status.hpp"
#include "image_dir_reader.hpp"
#include "partition_maps.hpp"
#include "peer_fetcher.hpp"
#include "staged_reader.hpp"
#include "stats.hpp"

namespace fanstore::daemon {

// After any activity the progress loop polls MPI without sleeping this long (progress_loop.cpp); a peer heard from
// well within it is not rung.
inline constexpr int64_t kHotWindowUs = 500;

struct TransportOptions {
  int rank = 0, nranks = 1;
  int replicas = 1;
  uint32_t replicated_part = kNoPartition;
  int timeout_ms = 5000;              // total budget of one fetch over all replicas
  uint64_t max_message = 1ull << 30;  // bigger replies travel in chunks of this size (MPI counts are ints)
  // A duplicate of MPI_COMM_WORLD (MPI_Comm_dup by every rank at start-up) that carries only the chunks, tagged
  // with their reply's tag: no probe of the world communicator ever sees one, and chunks of two replies from one
  // peer can never be taken for each other.
  MPI_Comm chunk_comm = MPI_COMM_NULL;
  // Rung for a request or reply sent to a peer that may be asleep, so it wakes for it (null: peers find messages
  // at their next look).
  Doorbell* doorbell = nullptr;
  // Ranges of at least mapped_send_min bytes are sent straight from these mappings of the staged partitions
  // (null: every range is read into a send buffer first).
  PartitionMaps* maps = nullptr;
  uint64_t mapped_send_min = 64u << 10;  // (fanstore serve --mapped-send-min)
  // Reads a peer's range of ours that is not staged here yet from the image directory, off the progress thread
  // (null: such a range is an error reply).
  ImageDirReads* image_dir = nullptr;
  // (tests) At most this many reply slots (tags), so that they wrap around within a few fetches; 0: as many as
  // MPI_TAG_UB allows.
  int reply_slots = 0;
};

class MpiTransport final : public PeerFetcher {
 public:
  // `local` serves the other ranks' requests (a rank with nothing staged answers each with an error).
  MpiTransport(StagedReader* local, TransportOptions opts, DaemonStats* stats);
  ~MpiTransport();

  // Fetches `r` from the holders of r.part other than this rank, skipping peers known to be down.
  void Fetch(const ByteRange& r, FetchSink* sink) override;
  void FetchFrom(int rank, const ByteRange& r, bool staged_only, FetchSink* sink) override;
  // One step: answers peers, receives replies, completes sends, enforces deadlines, probes down peers.
  // True when it did anything.
  bool Progress();
  // Fetches of ours are in flight, and the oldest was sent at *oldest_us (their replies are usually
  // microseconds away: worth spinning for).
  bool Awaiting(int64_t* oldest_us) const;
  // Fails every pending fetch ("shutting down") and leaves MPI requests to MPI_Finalize. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fanstore::daemon
