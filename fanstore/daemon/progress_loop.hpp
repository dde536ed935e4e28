// The daemon's one progress thread: client sockets and the doorbell (epoll), MPI (polled: MPI has no fd to sleep
// on), the prefetch pump and the reads of the image directory done (by ImageDirReads' threads: it never reads the
// shared file system itself). How it waits when idle trades a peer's latency against idle CPU (docs/daemon.md,
// "Progress"): it polls flat out right after activity, then sleeps longer and longer in ppoll, which client bytes
// and doorbells end at once. --progress never sleeps.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "fetch_router.hpp"
#include "mpi_transport.hpp"
#include "socket_server.hpp"
#include "stager.hpp"

namespace fanstore::daemon {

class ProgressLoop {
 public:
  // `spin`: never sleep (--progress). `image_dir` (may be null): its reads done are handed on here.
  ProgressLoop(SocketServer* server, MpiTransport* transport, FetchRouter* router, Stager* stager,
               ImageDirReads* image_dir, bool spin)
      : server_(server), transport_(transport), router_(router), stager_(stager), image_dir_(image_dir), spin_(spin) {}
  ~ProgressLoop();  // a thread still inside an MPI call is left behind (the process is exiting)
  void Start();
  // Asks the started thread to stop and waits up to `wait_ms` for it. False when it did not stop (the caller then
  // exits the process rather than hang: a thread cannot be interrupted inside an MPI call).
  bool Stop(int wait_ms);

 private:
  void Run();
  SocketServer* server_;
  MpiTransport* transport_;
  FetchRouter* router_;
  Stager* stager_;
  ImageDirReads* image_dir_;
  bool spin_;
  std::thread th_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};
};

}  // namespace fanstore::daemon
