// `fanstore serve`: the per-node MPI daemon (stage this rank's partitions, then serve the node's clients).
#pragma once

#include <cstdint>
#include <string>

namespace fanstore::daemon {

struct ServeOptions {
  std::string image;       // image directory on the shared file system
  std::string local;       // node-local staging directory; "{rank}" expands to the MPI rank, "{node}" to the node name
  std::string socket;      // Unix socket; empty = <local>/fanstore.sock; "{rank}" and "{node}" expand
  int replicas = 1;        // copies of each regular partition (distinct ranks)
  double timeout_s = 5.0;  // a remote read fails (EIO) within this
  bool cleanup = false;    // remove the staged data at exit
  uint64_t reserve_bytes = 0;            // leave this much free on the local file system
  uint64_t cache_bytes = 1ull << 30;     // node RAM cache of fetched remote bytes (0: off)
  bool cache_prefault = false;           // fault the cache's memory in while staging (at most half of MemAvailable)
  uint64_t prefetch_window = 0;          // bytes fetched ahead of the readers; 0: half the cache
  double prefetch_idle_s = 10.0;         // a hint stream not read for this long yields the window to active ones
  uint64_t conn_memory = 64ull << 20;    // a connection's reply area grows up to this
  std::string socket_mode;               // octal permission bits of the socket; empty: 0600 (0660 with group)
  std::string group;                     // group (name or gid) whose members may use the daemon
  bool progress_spin = false;            // poll MPI flat out (a core at 100%) for the lowest latency
  bool doorbell = true;                  // wake peers for each message by a UDP datagram (docs/daemon.md)
  uint64_t mapped_send_min = 64u << 10;  // peers' ranges of this size or more go straight from the mapping (0: never)
  uint64_t max_message = 1ull << 30;     // (tests) bigger replies between daemons travel in chunks of this size
  uint64_t stage_bandwidth = 0;          // bytes/s this daemon reads from the image directory, at most (0: no cap)
  int stage_readers = 0;                 // ranks reading the image directory at a time (0: all)
  bool strict_staging = false;           // "ready" only once every rank has staged; a failure anywhere stops all
  uint64_t piece_bytes = 4ull << 20;     // staging's unit: read once, sent to the other holders, verified
};

// Runs the daemon until SIGTERM/SIGINT/SIGHUP. Calls MPI_Init/MPI_Finalize itself. Every rank returns non-zero
// when any rank fails to set up (with --strict-staging: to stage). Messages are one line each, prefixed "fanstore
// serve[rank N]: ".
int Serve(const ServeOptions& opts);

}  // namespace fanstore::daemon
