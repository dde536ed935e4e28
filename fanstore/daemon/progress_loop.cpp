#include "progress_loop.hpp"

#include <sched.h>
#include <sys/prctl.h>

#include <chrono>

#include "fanstore/protocol/payload_memfd.hpp"

namespace fanstore::daemon {

namespace dp = daemon_proto;

// While a fetch of ours is younger than this, the loop polls for its reply (usually microseconds away).
constexpr int64_t kAwaitSpinUs = 2000;

ProgressLoop::~ProgressLoop() {
  if (!th_.joinable()) return;
  if (exited_) th_.join();
  else th_.detach();
}

void ProgressLoop::Start() {
  th_ = std::thread([this] {
    // The default 50 us timer slack would stretch every short idle wait (and so every remote read) by 50 us.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    Run();
    exited_ = true;
  });
}

void ProgressLoop::Run() {
  int64_t last = dp::NowUs();
  while (!stop_.load(std::memory_order_relaxed)) {
    bool did = server_->Poll(0);
    did |= transport_->Progress();
    did |= router_->Pump();
    did |= stager_->Poll();
    int64_t now = dp::NowUs();
    if (image_dir_) did |= image_dir_->Poll(now);
    if (did) {
      last = now;
      continue;
    }
    int64_t oldest = 0;
    bool awaiting = transport_->Awaiting(&oldest);
    // A reply to our own request is usually microseconds away; so is the next request right after traffic. Spinning
    // for it beat 50 us naps even with every CPU busy (docs/performance.md, "Why the daemon is built as it is").
    bool hot = now - last < kHotWindowUs || (awaiting && now - oldest < kAwaitSpinUs);
    if (spin_ || hot) {
      sched_yield();
      continue;
    }
    int64_t idle = now - last;
    int64_t wait = idle < 50000 ? 200 : idle < 1000000 ? 1000 : 2000;
    if (awaiting) wait = 200;
    if (server_->Poll(wait)) last = dp::NowUs();
  }
}

bool ProgressLoop::Stop(int wait_ms) {
  stop_ = true;
  server_->Wake();
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (!exited_ && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!exited_) return false;
  th_.join();
  return true;
}

}  // namespace fanstore::daemon
