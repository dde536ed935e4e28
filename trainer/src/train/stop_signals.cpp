#include "stop_signals.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace fanstore::trainer {
namespace {

volatile sig_atomic_t g_caught = 0;
volatile sig_atomic_t g_announce = 0;

void write_all(const char* text) {
  for (std::size_t left = std::strlen(text); left > 0;) {
    const ssize_t n = write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

void set_default_action(int sig) {
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(sig, &fallback, nullptr);
}

void on_stop_signal(int sig) {
  if (g_caught != 0) return;
  g_caught = sig;
  // Async-signal-safe calls only: sigaction(2) and write(2), no streams.
  set_default_action(SIGTERM);
  set_default_action(SIGINT);
  if (!g_announce) return;
  write_all("fanstore-train: ");
  write_all(stop_signal_name(sig));
  write_all(
      ": stopping at the end of this step with a checkpoint (SIGTERM or SIGINT again stops at once, without "
      "one)\n");
}

}  // namespace

void catch_stop_signals(bool announce) {
  g_announce = announce ? 1 : 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the loader's reads and MPI's polls go on
  for (const int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &action, nullptr);
}

void restore_stop_signals() {
  for (const int sig : {SIGTERM, SIGINT, SIGUSR1}) set_default_action(sig);
}

int caught_stop_signal() { return g_caught; }

const char* stop_signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGUSR1"; }

}  // namespace fanstore::trainer
