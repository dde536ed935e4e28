// fanstore-pingpong: the MPI floor under a remote read: rank 0 sends small requests, the other ranks reply with the
// file's bytes.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace {

constexpr int kRequestTag = 1, kReplyTag = 2, kStopTag = 3;

// Ranks >= 1: answer every request (the requested size is in the message) with that many bytes, until told to stop.
void Serve() {
  std::vector<char> reply;
  for (;;) {
    long long size = 0;
    MPI_Status st;
    MPI_Recv(&size, 1, MPI_LONG_LONG, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    if (st.MPI_TAG == kStopTag) return;
    if (reply.size() < static_cast<size_t>(size)) reply.resize(static_cast<size_t>(size), 'x');
    MPI_Send(reply.data(), static_cast<int>(size), MPI_CHAR, 0, kReplyTag, MPI_COMM_WORLD);
  }
}

// Rank 0: `window` requests in flight at once (window 1 = latency), spread round-robin over the `servers`
// other ranks as the daemons spread files over partitions; returns seconds per request.
double Measure(long long size, int window, int servers, double min_time) {
  std::vector<std::vector<char>> bufs(static_cast<size_t>(window), std::vector<char>(static_cast<size_t>(size)));
  std::vector<MPI_Request> reqs(static_cast<size_t>(window));
  std::vector<long long> sizes(static_cast<size_t>(window), size);
  long long done = 0;
  int next_server = 0;
  double start = fanstore::bench::NowSeconds(), now = start;
  do {
    for (int w = 0; w < window; ++w) {
      int peer = 1 + next_server;
      next_server = (next_server + 1) % servers;
      MPI_Irecv(bufs[w].data(), static_cast<int>(size), MPI_CHAR, peer, kReplyTag, MPI_COMM_WORLD, &reqs[w]);
      MPI_Send(&sizes[w], 1, MPI_LONG_LONG, peer, kRequestTag, MPI_COMM_WORLD);
    }
    MPI_Waitall(window, reqs.data(), MPI_STATUSES_IGNORE);
    done += window;
    now = fanstore::bench::NowSeconds();
  } while (now - start < min_time);
  return (now - start) / static_cast<double>(done);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string sizes_arg = "4096,131072,4194304";
  double min_time = 0.3;
  int window = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--sizes") sizes_arg = argv[i + 1];
    else if (k == "--min-time") min_time = std::atof(argv[i + 1]);
    else if (k == "--window") window = std::atoi(argv[i + 1]);
  }
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "fanstore-pingpong: needs at least 2 ranks (mpirun -np 4)\n");
    MPI_Finalize();
    return 2;
  }
  if (rank != 0) {
    Serve();
  } else {
    std::printf("size,latency_us,mib_per_s_window%d\n", window);
    std::stringstream ss(sizes_arg);
    std::string item;
    while (std::getline(ss, item, ',')) {
      long long bytes = std::atoll(item.c_str());
      Measure(bytes, 1, size - 1, 0.02);  // warm-up: connection set-up and buffer registration out of the timing
      double lat = Measure(bytes, 1, size - 1, min_time);
      double per = Measure(bytes, window, size - 1, min_time);
      std::printf("%lld,%.2f,%.2f\n", bytes, lat * 1e6, static_cast<double>(bytes) / per / (1024.0 * 1024.0));
    }
    long long stop = 0;
    for (int peer = 1; peer < size; ++peer) MPI_Send(&stop, 1, MPI_LONG_LONG, peer, kStopTag, MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return 0;
}
