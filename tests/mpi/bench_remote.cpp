// Benchmark: remote-read latency through a fanstore daemon next to a raw MPI ping-pong of the same size,
// measured in one run. Run with 2 ranks on the nodes (or cores) the daemons use, e.g.
//   mpirun -np 2 bench_remote --socket <rank-0 daemon socket> --size 131072
// Ranks 0 and 1 first ping-pong `size` bytes; then rank 0 (not using MPI for it) loads every remote file of
// exactly `size` bytes through Client (no cache), which is one daemon->daemon MPI round-trip each, plus the
// socket hop, the memfd hand-off, and the checksum.
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "fanstore/client.hpp"
#include "fanstore/daemon_client.hpp"

namespace {

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  CLI::App app{"Remote read through the daemon vs. MPI ping-pong, same size, same run"};
  std::string socket;
  uint64_t size = 128 * 1024;
  int iters = 200, rounds = 3;
  app.add_option("--socket", socket, "Rank 0's daemon socket")->required();
  app.add_option("--size", size, "Bytes per message / file size to select")->capture_default_str();
  app.add_option("--iters", iters, "Ping-pong iterations")->capture_default_str();
  app.add_option("--rounds", rounds, "Passes over the remote files")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    MPI_Finalize();
    return rc;
  }
  if (n < 2) {
    if (rank == 0) std::fprintf(stderr, "bench_remote: needs 2 ranks\n");
    MPI_Finalize();
    return 1;
  }
  // Ping-pong between ranks 0 and 1 (others idle).
  std::vector<char> buf(size);
  std::vector<double> pp;
  for (int i = 0; i < iters + 10; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = std::chrono::steady_clock::now();
    if (rank == 0) {
      MPI_Send(buf.data(), static_cast<int>(size), MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), static_cast<int>(size), MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buf.data(), static_cast<int>(size), MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), static_cast<int>(size), MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 10) pp.push_back(us);
  }
  int rc = 0;
  if (rank == 0) {
    setenv("FANSTORE_DAEMON", socket.c_str(), 1);
    setenv("FANSTORE_CACHE_BYTES", "0", 1);  // every Load is a real remote read
    auto c = fanstore::Client::FromEnv();
    if (!c.ok()) {
      std::fprintf(stderr, "bench_remote: %s\n", c.status().ToString().c_str());
      rc = 1;
    } else {
      const fanstore::Image& img = (*c)->image();
      std::vector<uint32_t> ids;
      for (uint32_t id = 0; id < img.size(); ++id) {
        fanstore::Entry e = img.Get(id);
        if (e.is_reg() && e.size == size && !img.HasPartition(e.part)) ids.push_back(id);
      }
      std::vector<double> rr, local;
      for (int r = 0; r < rounds; ++r)
        for (uint32_t id : ids) {
          auto t0 = std::chrono::steady_clock::now();
          auto b = (*c)->Load(id);
          double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
          if (!b.ok()) {
            std::fprintf(stderr, "bench_remote: %s\n", b.status().ToString().c_str());
            rc = 1;
            break;
          }
          if (r > 0 || ids.size() < 4) rr.push_back(us);  // first pass warms connections and the owners
        }
      for (uint32_t id = 0; id < img.size(); ++id) {
        fanstore::Entry e = img.Get(id);
        if (!e.is_reg() || e.size != size || !img.HasPartition(e.part)) continue;
        auto t0 = std::chrono::steady_clock::now();
        auto b = (*c)->Load(id);
        local.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        (void)b;
      }
      std::printf("bench_remote: size %llu B\n", static_cast<unsigned long long>(size));
      std::printf("  MPI ping-pong round-trip      : p50 %8.1f us  p99 %8.1f us  (%zu iters)\n", Pct(pp, 0.5),
                  Pct(pp, 0.99), pp.size());
      std::printf("  remote read via daemon (Load) : p50 %8.1f us  p99 %8.1f us  (%zu reads, ratio p50 %.1fx)\n",
                  Pct(rr, 0.5), Pct(rr, 0.99), rr.size(), Pct(pp, 0.5) > 0 ? Pct(rr, 0.5) / Pct(pp, 0.5) : 0.0);
      std::printf("  local read (Load, same node)  : p50 %8.1f us  p99 %8.1f us  (%zu reads)\n", Pct(local, 0.5),
                  Pct(local, 0.99), local.size());
      if (rr.empty()) {
        std::fprintf(stderr, "bench_remote: no remote file of exactly %llu bytes in the image\n",
                     static_cast<unsigned long long>(size));
        rc = 1;
      }
    }
  }
  // Rank 1 must not busy-poll in a blocking collective while rank 0 measures (it would steal a core from
  // the daemons): a nonblocking broadcast tested every millisecond.
  MPI_Request done;
  MPI_Ibcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD, &done);
  for (int flag = 0; !flag;) {
    MPI_Test(&done, &flag, MPI_STATUS_IGNORE);
    if (!flag) usleep(1000);
  }
  MPI_Finalize();
  return rc;
}
