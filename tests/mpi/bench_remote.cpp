// Benchmark driver (scripts/bench.sh): remote fetches through the node's daemon, the daemon's part of a remote read
// -- the stored bytes of a file of another node landing in the caller's buffer, as an MPI receive would -- without
// the client's decode and file-system layers. For each size: the mean latency of one reader, then the throughput
// of --threads readers, each over every remote file of exactly that size, for at least --min-time seconds.
// Prints "size,latency_us,mib_per_s_threads<N>". MPI-free: it talks to the daemon at FANSTORE_DAEMON.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fanstore/client.hpp"
#include "fanstore/daemon_client.hpp"
#include "remote_fetcher.hpp"

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Remote fetches through the node's fanstore daemon: latency and throughput per file size"};
  std::string sizes = "4096,131072,4194304";
  int threads = 4;
  double min_time = 0.3;
  app.add_option("--sizes", sizes, "File sizes to select (bytes, comma-separated)")->capture_default_str();
  app.add_option("--threads", threads, "Readers for the throughput figure")->capture_default_str();
  app.add_option("--min-time", min_time, "Seconds per measurement (at least one pass)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const char* sock = std::getenv("FANSTORE_DAEMON");
  if (!sock || !*sock) {
    std::fprintf(stderr, "bench_remote: set FANSTORE_DAEMON (or run under `fanstore run --daemon`)\n");
    return 2;
  }
  setenv("FANSTORE_CACHE_BYTES", "0", 1);
  auto client = fanstore::Client::FromEnv();
  if (!client.ok()) {
    std::fprintf(stderr, "bench_remote: %s\n", client.status().ToString().c_str());
    return 1;
  }
  fanstore::DaemonInfo info;
  auto fetcher = fanstore::ConnectDaemonFetcher(sock, &info);
  if (!fetcher.ok()) {
    std::fprintf(stderr, "bench_remote: %s\n", fetcher.status().ToString().c_str());
    return 1;
  }
  const fanstore::Image& img = (*client)->image();
  std::printf("size,latency_us,mib_per_s_threads%d\n", threads);
  std::stringstream ss(sizes);
  for (std::string item; std::getline(ss, item, ',');) {
    uint64_t size = std::strtoull(item.c_str(), nullptr, 10);
    std::vector<fanstore::Entry> files;
    for (uint32_t id = 0; id < img.size(); ++id) {
      fanstore::Entry e = img.Get(id);
      if (e.is_reg() && e.stored_size == size && !img.HasPartition(e.part)) files.push_back(e);
    }
    if (files.empty()) {
      std::fprintf(stderr, "bench_remote: no remote file stored in exactly %llu bytes\n",
                   static_cast<unsigned long long>(size));
      return 1;
    }
    std::atomic<bool> failed{false};
    // Each reader walks the files from its own starting point; returns files fetched.
    auto run = [&](int nthreads) {
      std::atomic<uint64_t> done{0};
      double t0 = Now();
      std::vector<std::thread> ts;
      for (int t = 0; t < nthreads; ++t)
        ts.emplace_back([&, t] {
          std::vector<char> buf(size);  // the caller's buffer, warm after the first fetch
          for (size_t i = static_cast<size_t>(t) * files.size() / nthreads, k = 0;; ++i, ++k) {
            if (k >= files.size() && Now() - t0 >= min_time) break;
            const fanstore::Entry& e = files[i % files.size()];
            fanstore::Status s = (*fetcher)->WithStored(e, [&](const char* d, size_t n) {
              std::memcpy(buf.data(), d, n);
              return fanstore::Status::Ok();
            });
            if (!s.ok()) {
              std::fprintf(stderr, "bench_remote: %s\n", s.ToString().c_str());
              failed = true;
              return;
            }
            done.fetch_add(1);
          }
        });
      for (auto& th : ts) th.join();
      return std::make_pair(done.load(), Now() - t0);
    };
    run(1);  // warm-up: connections, reply areas, the owners' send buffers
    auto [n1, s1] = run(1);
    auto [nt, st] = run(threads);
    if (failed) return 1;
    std::printf("%llu,%.2f,%.2f\n", static_cast<unsigned long long>(size), s1 / static_cast<double>(n1) * 1e6,
                static_cast<double>(nt) * static_cast<double>(size) / st / (1 << 20));
    std::fflush(stdout);
  }
  return 0;
}
