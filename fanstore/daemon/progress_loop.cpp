// ProgressLoop: one step = client I/O, MPI progress, prefetch pump; then the adaptive wait.
#include "progress_loop.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "daemon_protocol.hpp"

namespace fanstore::daemon {

namespace dp = daemon_proto;

// The hot loop's nap when every CPU is busy: a few times cheaper in CPU than spinning through it, and a few times
// faster to answer than the idle ladder's 200 us (measured: 4 KiB fetches p50 268 us vs 780 us at load 7 on 2 cores).
constexpr int64_t kHotNapUs = 50;

ProgressLoop::~ProgressLoop() {
  if (th_.joinable()) {
    if (exited_) th_.join();
    else th_.detach();
  }
}

void ProgressLoop::Start() {
  th_ = std::thread([this] {
    // The default 50 us timer slack would stretch every short idle wait (and so every remote read) by 50 us.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    Run();
    exited_ = true;
  });
}

namespace {

// True when every CPU this thread may run on is wanted by a runnable task (ours included): spinning then takes
// CPU from the application (sched_yield does not give up a fair share). From /proc/loadavg's running count,
// looked at most every 2 ms; unknown counts as not contended.
class Contention {
 public:
  Contention() {
    cpu_set_t set;
    cpus_ = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    // Kept open: an open and close every 2 ms cost the busiest daemon more than the read (perf: ~4% of its time).
    fd_ = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  }
  ~Contention() {
    if (fd_ >= 0) close(fd_);
  }
  Contention(const Contention&) = delete;
  Contention& operator=(const Contention&) = delete;
  bool Now(int64_t now_us) {
    if (now_us - checked_ < 2000) return contended_;
    checked_ = now_us;
    contended_ = false;
    if (fd_ < 0) return contended_;
    char buf[128];
    ssize_t n = pread(fd_, buf, sizeof buf - 1, 0);
    if (n <= 0) return contended_;
    buf[n] = '\0';
    // "0.52 0.58 0.59 3/412 1234": the fourth field is running/total.
    double a, b, c;
    int running = 0, total = 0;
    if (std::sscanf(buf, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) == 5) contended_ = running > cpus_;
    return contended_;
  }

 private:
  int cpus_ = 1;
  int fd_ = -1;
  int64_t checked_ = -1000000;
  bool contended_ = false;
};

}  // namespace

void ProgressLoop::Run() {
  Contention contention;
  int64_t last = dp::NowUs();
  while (!stop_.load(std::memory_order_relaxed)) {
    bool did = server_->Poll(0);
    did |= transport_->Progress();
    did |= router_->Pump();
    if (stager_) did |= stager_->Poll();
    int64_t now = dp::NowUs();
    if (did) {
      last = now;
      continue;
    }
    int64_t oldest = 0;
    bool awaiting = transport_->Awaiting(&oldest);
    // A reply to our own request is usually microseconds away; so is the next request right after traffic. Spin
    // for it on a spare CPU only: when every CPU is busy (the loader decoding, other daemons) spinning would slow
    // down the very readers it serves (sched_yield does not give up a fair share), so it takes short naps.
    bool hot = now - last < o_.hot_us || (awaiting && now - oldest < 2000);
    if (o_.spin || (hot && !contention.Now(now))) {
      sched_yield();
      continue;
    }
    if (hot) {
      if (server_->Poll(kHotNapUs)) last = dp::NowUs();
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
  if (!th_.joinable()) return true;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (!exited_ && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!exited_) return false;
  th_.join();
  return true;
}

}  // namespace fanstore::daemon
