// The daemon's one progress thread: client sockets and the doorbell (epoll), MPI (polled: MPI has no fd to sleep
// on) and the prefetch pump. How it waits when there is nothing to do decides both the latency of a peer's request
// and the idle CPU: for a "hot" window (0.5 ms) after any activity and while a fetch of ours is young it polls flat
// out, then sleeps in ppoll for 200 us, 1 ms, then 2 ms between looks at MPI. Client bytes and peers' doorbell
// datagrams (doorbell.hpp: rung by a peer that sends this rank a request or a reply while this rank may be
// asleep) end any of these waits at once. --progress
// never sleeps: the lowest latency, for a core at 100%.
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
  // `stager` may be null; `spin`: never sleep (--progress).
  ProgressLoop(SocketServer* server, MpiTransport* transport, FetchRouter* router, Stager* stager, bool spin)
      : server_(server), transport_(transport), router_(router), stager_(stager), spin_(spin) {}
  ~ProgressLoop();
  void Start();
  // Asks the thread to stop and waits up to `wait_ms` for it. False when it did not stop (the caller then exits
  // the process rather than hang: a thread cannot be interrupted inside an MPI call).
  bool Stop(int wait_ms);

 private:
  void Run();
  SocketServer* server_;
  MpiTransport* transport_;
  FetchRouter* router_;
  Stager* stager_;
  bool spin_;
  std::thread th_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};
};

}  // namespace fanstore::daemon
