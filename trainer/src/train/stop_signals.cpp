#include "stop_signals.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace fanstore::trainer {
namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};
// Lock-free, so a handler may use it; the first signal wins when two threads take one each at once.
std::atomic<int> g_caught{0};
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<bool> g_announce{false};

void write_all(const char* text) {
  for (std::size_t left = std::strlen(text); left > 0;) {
    const ssize_t n = write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Async-signal-safe calls only: sigaction(2) (through signal), sigprocmask(2), raise(3) and write(2), no streams.
// Run by the handler or by the watcher thread, where the signal is blocked: it unblocks SIGINT before raising it.
void on_stop_signal(int sig) {
  int none = 0;
  if (!g_caught.compare_exchange_strong(none, sig)) {
    if (sig == SIGINT) {
      signal(SIGINT, SIG_DFL);
      sigset_t sigint;
      sigemptyset(&sigint);
      sigaddset(&sigint, SIGINT);
      pthread_sigmask(SIG_UNBLOCK, &sigint, nullptr);
      raise(SIGINT);
    }
    return;
  }
  if (!g_announce.load()) return;
  write_all("fanstore-train: ");
  write_all(stop_signal_name(sig));
  write_all(": the run stops with a checkpoint at the end of the step in progress (SIGINT again stops it at once)\n");
}

}  // namespace

StopSignals::StopSignals(bool announce) {
  g_caught.store(0);
  g_announce.store(announce);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the loader's reads and MPI's polls go on
  sigemptyset(&caught_set_);
  for (int i = 0; i < 3; ++i) {
    installed_[i] = sigaction(kStopSignals[i], nullptr, &old_[i]) == 0 && old_[i].sa_handler != SIG_IGN &&
                    sigaction(kStopSignals[i], &action, nullptr) == 0;
    if (installed_[i]) sigaddset(&caught_set_, kStopSignals[i]);
  }
  pthread_sigmask(SIG_BLOCK, &caught_set_, &old_mask_);
  watcher_ = std::thread([this] { watch(); });
}

void StopSignals::watch() {
  const timespec tick{0, 100 * 1000 * 1000};  // how long the destructor may wait for this thread
  while (!done_.load())
    if (const int sig = sigtimedwait(&caught_set_, nullptr, &tick); sig > 0) on_stop_signal(sig);
}

StopSignals::~StopSignals() {
  done_.store(true);
  watcher_.join();
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);  // (a signal come meanwhile reaches the handler, still there)
  for (int i = 0; i < 3; ++i)
    if (installed_[i]) sigaction(kStopSignals[i], &old_[i], nullptr);
}

int StopSignals::caught() { return g_caught.load(); }

const char* stop_signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGUSR1"; }

}  // namespace fanstore::trainer
