// A training run asked to stop by a signal (docs/training.md, "Stopping a run"): SIGTERM, SIGINT and SIGUSR1
// set a flag that the loop reads at each step's end, where every rank can stop at the same step and the
// checkpoint is whole.
#pragma once

#include <signal.h>

#include <atomic>
#include <thread>

namespace fanstore::trainer {

// Catches the stop signals for as long as it lives, then puts back what was there. A signal ignored at the start
// (a shell's background job's SIGINT, nohup's SIGHUP) stays ignored. After the first stop signal, a SIGINT kills
// at once (Ctrl-C twice); a repeated SIGTERM or SIGUSR1 changes nothing (Slurm may deliver SIGTERM twice, through
// srun and slurmstepd). `announce`: this process says on stderr, at once, that it will stop.
//
// The calling thread, and every thread it starts while this lives, blocks the signals, and a thread of this
// object's waits for them: a signal's frame must never be pushed onto a thread that runs oneDNN, whose JIT GEMM
// kernels (oneDNN 2.x to 3.11) point the stack register at the heap, where the frame corrupts it (oneDNN issue
// 4845; docs/training.md, "Stopping a run"). Threads started before (MPI's) run the handler instead.
class StopSignals {
 public:
  explicit StopSignals(bool announce);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal caught while one lived, or 0.
  static int caught();

 private:
  void watch();

  struct sigaction old_[3] = {};
  bool installed_[3] = {};
  sigset_t caught_set_{}, old_mask_{};
  std::atomic<bool> done_{false};
  std::thread watcher_;
};

// "SIGTERM", "SIGINT" or "SIGUSR1".
const char* stop_signal_name(int sig);

}  // namespace fanstore::trainer
