// A training run asked to stop by a signal (docs/training.md, "Stopping a run"): SIGTERM, SIGINT and SIGUSR1
// set a flag that the step loop reads at the end of each step, where every rank can stop at the same step and
// the checkpoint is whole. After the first, SIGTERM and SIGINT have their default action again: the run dies at
// once, without a checkpoint.
#pragma once

namespace fanstore::trainer {

// Installs the handlers; `announce`: this process says, in one line on stderr, that it will stop.
void catch_stop_signals(bool announce);

// Gives SIGTERM, SIGINT and SIGUSR1 their default actions again.
void restore_stop_signals();

// The first stop signal caught since catch_stop_signals, or 0.
int caught_stop_signal();

// "SIGTERM", "SIGINT" or "SIGUSR1" for a stop signal.
const char* stop_signal_name(int sig);

}  // namespace fanstore::trainer
