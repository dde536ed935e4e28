// Client side of a node's `fanstore serve` daemon: handshake, readiness wait, and the RemoteFetcher over its socket.
// MPI-free: user processes link only this; the daemon does the MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fanstore/client.hpp"
#include "fanstore/status.hpp"

namespace fanstore {

// What a daemon tells a client on connect.
struct DaemonInfo {
  uint32_t rank = 0, nranks = 0;
  uint32_t timeout_ms = 0;    // the daemon's --timeout: a remote read fails within it
  std::string index_dir;      // open the image here (a copy of index.fsi)
  std::string partition_dir;  // this node's staged partitions (read directly, no round-trip)
};

// Connects to the daemon at `socket_path` and handshakes, giving up after `timeout_ms`.
// kIoError with the reason (no such socket, refused, closed) or kTimeout.
Result<DaemonInfo> ProbeDaemon(const std::string& socket_path, int timeout_ms);

// Retries ProbeDaemon until it succeeds (OK) or `timeout_ms` passes (kTimeout naming the last failure).
Status WaitForDaemon(const std::string& socket_path, int timeout_ms);

// A RemoteFetcher over the daemon socket. Thread-safe: a small pool of connections, one request in flight
// on each; fork-safe: a child drops inherited connections and reconnects lazily. Every socket wait is
// bounded by the daemon's --timeout, so a dead daemon is kTimeout/kIoError, never a hang.
Result<std::shared_ptr<RemoteFetcher>> ConnectDaemonFetcher(const std::string& socket_path, DaemonInfo* info);

}  // namespace fanstore
