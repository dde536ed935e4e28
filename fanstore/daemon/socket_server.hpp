// The daemon's Unix-socket front: accepts this node's client processes, answers hellos and fetches
// (local partitions read here, the rest through the MPI transport). It has no thread of its own: the
// transport's progress thread calls Poll, so a remote fetch never crosses a thread boundary in the daemon.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "daemon_protocol.hpp"
#include "fanstore/image.hpp"
#include "fanstore/status.hpp"
#include "mpi_transport.hpp"
#include "stats.hpp"

namespace fanstore::daemon {

class SocketServer {
 public:
  SocketServer(std::shared_ptr<const Image> image, MpiTransport* transport, DaemonStats* stats,
               daemon_proto::HelloInfo hello);
  ~SocketServer();

  // Listens under a temporary name next to `path` (so clients cannot connect before Publish). Refuses a
  // path where a live daemon answers; replaces a stale socket left by a killed one.
  Status Bind(const std::string& path);
  // Renames the socket to its final path: from now on `fanstore wait` and clients see it.
  Status Publish();
  // Handles client I/O, waiting at most timeout_us for some; true when anything happened. One thread only.
  bool Poll(int64_t timeout_us);
  // Interrupts a Poll in progress; any thread.
  void Wake();
  // Closes every connection (clients then get EIO at once) and removes the socket. Not concurrent with Poll.
  void Stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fanstore::daemon
