// Benchmark of the ways a daemon can answer a peer's read (docs/daemon.md, "Progress"): 2 ranks, rank 1
// owns a file in the page cache, rank 0 asks for `size` bytes of it, one request at a time; prints the p50
// round-trip and the owner's CPU use while idle. One mode per run (thread levels differ):
//   spin     owner blocks in MPI_Recv (Open MPI spins inside): the ping-pong floor, a core burnt while idle
//   poll     owner polls with MPI_Improbe and sleeps in ppoll between polls (what `fanstore serve` does by default);
//            measured hot (back-to-back requests) and cold (requests 20 ms apart: the owner has gone to sleep)
//   thread   MPI_THREAD_MULTIPLE, a receive thread blocking in MPI_Mprobe while the main thread sleeps
//   get      one-sided MPI_Rget from a window over the owner's mmap'd file (no owner code on the data path)
// e.g. mpirun -np 2 bench_transport --mode poll
#include <fcntl.h>
#include <mpi.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kReq = 1, kRep = 2, kStop = 3;
constexpr uint64_t kFileBytes = 4 << 20;

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double P50(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The owner's CPU time and wall clock when its first request arrived: the span before it is idle time.
std::atomic<bool> g_first{true};
double g_idle_cpu = -1, g_idle_wall = 0;
double g_start_cpu = 0, g_start_wall = 0;

// Owner side of the two-sided modes: answers one request (its size) from the file.
void Answer(int fd, std::vector<char>& buf, const MPI_Status& st, long long size) {
  if (g_first.exchange(false)) {
    g_idle_cpu = CpuSeconds() - g_start_cpu;
    g_idle_wall = Now() - g_start_wall;
  }
  if (buf.size() < static_cast<size_t>(size)) buf.resize(static_cast<size_t>(size));
  ssize_t n = pread(fd, buf.data(), static_cast<size_t>(size), 0);
  (void)n;
  MPI_Send(buf.data(), static_cast<int>(size), MPI_BYTE, st.MPI_SOURCE, kRep, MPI_COMM_WORLD);
}

// Owner loop of `poll`: Improbe, else sleep `sleep_us` in ppoll (the daemon's idle wait). Ends on kStop.
void OwnerPoll(int fd, int sleep_us) {
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  std::vector<char> buf;
  for (;;) {
    int flag = 0;
    MPI_Message m;
    MPI_Status st;
    MPI_Improbe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &m, &st);
    if (!flag) {
      timespec ts{0, sleep_us * 1000L};
      ppoll(nullptr, 0, &ts, nullptr);
      continue;
    }
    long long size = 0;
    MPI_Mrecv(&size, 1, MPI_LONG_LONG, &m, MPI_STATUS_IGNORE);
    if (st.MPI_TAG == kStop) return;
    Answer(fd, buf, st, size);
  }
}

void OwnerBlocking(int fd) {
  std::vector<char> buf;
  for (;;) {
    MPI_Message m;
    MPI_Status st;
    MPI_Mprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &m, &st);
    long long size = 0;
    MPI_Mrecv(&size, 1, MPI_LONG_LONG, &m, MPI_STATUS_IGNORE);
    if (st.MPI_TAG == kStop) return;
    Answer(fd, buf, st, size);
  }
}

// Asker: `iters` requests of `size` bytes, `gap_s` apart; p50 round-trip in microseconds.
double Ask(long long size, int iters, double gap_s, MPI_Win win) {
  std::vector<char> buf(static_cast<size_t>(size));
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    if (gap_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(gap_s));
    double t0 = Now();
    if (win != MPI_WIN_NULL) {
      MPI_Request r;
      MPI_Rget(buf.data(), static_cast<int>(size), MPI_BYTE, 1, 0, static_cast<int>(size), MPI_BYTE, win, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
      MPI_Send(&size, 1, MPI_LONG_LONG, 1, kReq, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), static_cast<int>(size), MPI_BYTE, 1, kRep, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (i >= 3) t.push_back((Now() - t0) * 1e6);
  }
  return P50(t);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"How an owner daemon can answer a peer: latency and idle CPU of each way, same run"};
  std::string mode = "poll";
  int sleep_us = 2000, iters = 200;
  app.add_option("--mode", mode, "spin, poll, thread or get")->check(CLI::IsMember({"spin", "poll", "thread", "get"}));
  app.add_option("--sleep-us", sleep_us, "poll: the owner's sleep between polls when idle")->capture_default_str();
  app.add_option("--iters", iters, "requests per size")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, mode == "thread" ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2 || (mode == "thread" && provided < MPI_THREAD_MULTIPLE)) {
    if (rank == 0) std::fprintf(stderr, "bench_transport: needs 2 ranks (and MPI_THREAD_MULTIPLE for --mode thread)\n");
    MPI_Finalize();
    return 2;
  }
  // The owner's file, in the page cache (a staged partition).
  int fd = -1;
  void* map = nullptr;
  if (rank == 1) {
    char path[] = "/dev/shm/bench-transport-XXXXXX";
    fd = mkstemp(path);
    unlink(path);
    std::vector<char> data(kFileBytes);
    std::mt19937_64 rng(7);
    for (auto& c : data) c = static_cast<char>(rng());
    if (pwrite(fd, data.data(), data.size(), 0) != static_cast<ssize_t>(data.size())) return 1;
    map = mmap(nullptr, kFileBytes, PROT_READ, MAP_SHARED, fd, 0);
  }
  MPI_Win win = MPI_WIN_NULL;
  if (mode == "get") {
    MPI_Win_create(rank == 1 ? map : nullptr, rank == 1 ? kFileBytes : 0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    if (rank == 0) MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
  }
  const long long sizes[] = {4096, 131072, 4 << 20};
  std::thread receiver;
  if (rank == 1 && mode == "thread") receiver = std::thread([fd] { OwnerBlocking(fd); });
  g_start_cpu = CpuSeconds();
  g_start_wall = Now();
  if (rank == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the owner idles first: its CPU is measured
    std::printf("mode %s%s\n", mode.c_str(),
                mode == "poll" ? (" (owner sleeps " + std::to_string(sleep_us) + " us)").c_str() : "");
    for (long long s : sizes) {
      double hot = Ask(s, iters, 0, win);
      double cold = Ask(s, 20, 0.02, win);
      std::printf("  %8lld B: p50 %8.1f us back-to-back, %8.1f us 20 ms apart\n", s, hot, cold);
    }
    if (mode != "get") {
      long long z = 0;
      MPI_Send(&z, 1, MPI_LONG_LONG, 1, kStop, MPI_COMM_WORLD);
    }
  } else if (mode == "spin") {
    std::vector<char> buf;
    for (;;) {
      long long size = 0;
      MPI_Status st;
      MPI_Recv(&size, 1, MPI_LONG_LONG, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      if (st.MPI_TAG == kStop) break;
      Answer(fd, buf, st, size);
    }
  } else if (mode == "poll") {
    OwnerPoll(fd, sleep_us);
  } else if (mode == "thread") {
    receiver.join();
  }
  // `get`: the owner does nothing until the barrier (a nonblocking one tested every ms: a blocking barrier would spin).
  MPI_Request bar;
  if (mode == "get" && rank == 0) MPI_Win_unlock_all(win);
  MPI_Ibarrier(MPI_COMM_WORLD, &bar);
  for (int flag = 0; !flag;) {
    MPI_Test(&bar, &flag, MPI_STATUS_IGNORE);
    if (!flag) usleep(1000);
  }
  if (rank == 1 && mode == "get") {  // no request ever reaches the owner: all of its time was idle
    g_idle_cpu = CpuSeconds() - g_start_cpu;
    g_idle_wall = Now() - g_start_wall;
  }
  if (rank == 1)
    std::printf("  owner CPU while idle: %.1f%% of a core (over %.1f s)\n", 100.0 * g_idle_cpu / g_idle_wall,
                g_idle_wall);
  std::fflush(stdout);
  if (win != MPI_WIN_NULL) MPI_Win_free(&win);
  if (map) munmap(map, kFileBytes);
  if (fd >= 0) close(fd);
  MPI_Finalize();
  return 0;
}
