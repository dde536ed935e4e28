// Termination signals during start-up (MPI_Init, staging, the start-up collectives). The main thread cannot wait
// for them itself: a peer that died during start-up leaves it in a collective (MPI_Allreduce) for good, where a
// blocked SIGTERM would never be seen -- the daemon then ignored scancel/kill and left its staged data behind. A
// watcher thread takes them instead: staging stops at its next step, and if start-up has not ended `grace_ms`
// after the signal, the watcher removes the socket and (with --cleanup) what this rank staged, and exits.
#pragma once

#include <signal.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "socket_server.hpp"
#include "staged_files.hpp"

namespace fanstore::daemon {

class StartupSignals {
 public:
  // `sigs` must be blocked in every thread. `staged`: removed on the way out when `cleanup`.
  StartupSignals(const sigset_t& sigs, StagedFiles* staged, bool cleanup, int grace_ms);
  ~StartupSignals();
  // A termination signal arrived (staging stops at its next step).
  bool signalled() const { return sig_.load() != 0; }
  // The socket to remove should the watcher end the process (null: none, or no longer).
  void SetSocket(SocketServer* s);
  // Start-up is over: the watcher stops and the caller waits for signals itself. Returns the signal that
  // arrived meanwhile, or 0.
  int Handover();

 private:
  void Run();
  sigset_t sigs_;
  StagedFiles* staged_;
  bool cleanup_;
  int grace_ms_;
  std::atomic<int> sig_{0};
  std::atomic<bool> done_{false};
  std::mutex mu_;  // guards socket_, and the exit path against a concurrent SetSocket
  SocketServer* socket_ = nullptr;
  std::thread th_;
};

}  // namespace fanstore::daemon
