// StartupSignals: a sigtimedwait loop on its own thread, and the bounded exit when start-up does not end after one.
#include "startup_signals.hpp"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include <chrono>

#include "log.hpp"

namespace fanstore::daemon {

StartupSignals::StartupSignals(const sigset_t& sigs, StagedFiles* staged, bool cleanup, int grace_ms)
    : sigs_(sigs), staged_(staged), cleanup_(cleanup), grace_ms_(grace_ms) {
  th_ = std::thread([this] { Run(); });
}

StartupSignals::~StartupSignals() { Handover(); }

void StartupSignals::SetSocket(SocketServer* s) {
  std::lock_guard<std::mutex> g(mu_);
  socket_ = s;
}

int StartupSignals::Handover() {
  done_ = true;
  if (th_.joinable()) th_.join();
  return sig_.load();
}

void StartupSignals::Run() {
  // Short waits, so that Handover returns promptly.
  const timespec tick{0, 50 * 1000 * 1000};
  while (!done_.load() && sig_.load() == 0) {
    int s = sigtimedwait(&sigs_, nullptr, &tick);
    if (s > 0) sig_ = s;
  }
  if (sig_.load() == 0) return;
  // A signal: the main thread stops at its next step and exits; unless it is stuck waiting for a dead peer.
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms_);
  while (!done_.load() && std::chrono::steady_clock::now() < until) {
    timespec nap{0, 20 * 1000 * 1000};
    nanosleep(&nap, nullptr);
  }
  if (done_.load()) return;  // start-up ended: the main thread handles the signal
  std::lock_guard<std::mutex> g(mu_);
  Error(
      "stopping on %s during start-up: still waiting for the other ranks after %d s (one of them died?); "
      "exiting%s",
      strsignal(sig_.load()), grace_ms_ / 1000, cleanup_ ? " and removing what this rank staged" : "");
  if (socket_) socket_->Unpublish();
  if (cleanup_) staged_->RemoveAll();
  _exit(1);
}

}  // namespace fanstore::daemon
