// fanstore-iobench: times one path-based op over a file list (warm-up first) and prints one CSV line.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_util.hpp"
#include "iobench_ops.hpp"

namespace {

using fanstore::bench::IoOp;

struct Args {
  std::string op, path, list, label = "run";
  double min_time = 0.5;
  int warmup = 1, threads = 1;
  size_t block = 1 << 20;
  bool header = false;
};

struct ThreadResult {
  uint64_t ops = 0, items = 0;
  double seconds = 0;
  std::string error;
};

// Runs whole passes over `targets[begin, end)` until `min_time` has passed, so every file is hit equally often.
void TimedPasses(IoOp op, const std::vector<std::string>& targets, std::pair<size_t, size_t> range, const Args& a,
                 std::atomic<bool>& failed, ThreadResult& r) {
  std::vector<char> buffer(a.block);
  double start = fanstore::bench::NowSeconds(), now = start;
  do {
    for (size_t i = range.first; i < range.second; ++i) {
      int64_t n = fanstore::bench::RunIoOp(op, targets[i], buffer);
      if (n < 0) {
        r.error = targets[i] + ": " + std::strerror(errno);
        failed = true;
        return;
      }
      r.items += static_cast<uint64_t>(n);
      ++r.ops;
    }
    now = fanstore::bench::NowSeconds();
  } while (now - start < a.min_time && !failed);
  r.seconds = now - start;
}

int Run(const Args& a) {
  IoOp op;
  if (!fanstore::bench::ParseIoOp(a.op, op)) {
    std::fprintf(stderr, "fanstore-iobench: unknown --op '%s' (stat, open, read, readdir, seqread)\n", a.op.c_str());
    return 2;
  }
  std::vector<std::string> targets;
  if (a.list.empty()) {
    targets.push_back(a.path);
  } else {
    std::string error;
    if (!fanstore::bench::ReadFileList(a.list, a.path, targets, error)) {
      std::fprintf(stderr, "fanstore-iobench: %s\n", error.c_str());
      return 2;
    }
  }
  // Warm-up: fills the page cache / FanStore caches and faults in code, so the timed part is steady state.
  std::vector<char> buffer(a.block);
  for (int w = 0; w < a.warmup; ++w) {
    for (const auto& t : targets) {
      if (fanstore::bench::RunIoOp(op, t, buffer) < 0) {
        std::fprintf(stderr, "fanstore-iobench: %s %s: %s\n", a.op.c_str(), t.c_str(), std::strerror(errno));
        return 1;
      }
    }
  }
  const size_t nthreads = static_cast<size_t>(std::max(1, std::min<int>(a.threads, static_cast<int>(targets.size()))));
  std::vector<ThreadResult> results(nthreads);
  std::vector<std::thread> pool;
  std::atomic<bool> failed{false};
  double wall_start = fanstore::bench::NowSeconds();
  for (size_t t = 0; t < nthreads; ++t)
    pool.emplace_back(TimedPasses, op, std::cref(targets), fanstore::bench::SliceRange(targets.size(), nthreads, t),
                      std::cref(a), std::ref(failed), std::ref(results[t]));
  for (auto& th : pool) th.join();
  double wall = fanstore::bench::NowSeconds() - wall_start;

  uint64_t ops = 0, items = 0;
  double thread_seconds = 0;
  for (const auto& r : results) {
    if (!r.error.empty()) {
      std::fprintf(stderr, "fanstore-iobench: %s %s\n", a.op.c_str(), r.error.c_str());
      return 1;
    }
    ops += r.ops;
    items += r.items;
    thread_seconds += r.seconds;
  }
  // Latency is per thread (time each op took); throughput is aggregate over the wall clock.
  double ns_per_op = thread_seconds * 1e9 / static_cast<double>(ops);
  double ops_per_s = static_cast<double>(ops) / wall;
  bool bytes = op == IoOp::kRead || op == IoOp::kSeqRead;
  double mib_per_s = bytes ? static_cast<double>(items) / wall / (1024.0 * 1024.0) : 0.0;
  if (a.header) std::printf("label,op,threads,ops,seconds,ns_per_op,ops_per_s,mib_per_s,items\n");
  std::printf("%s,%s,%zu,%llu,%.4f,%.1f,%.1f,%.2f,%llu\n", a.label.c_str(), a.op.c_str(), nthreads,
              static_cast<unsigned long long>(ops), wall, ns_per_op, ops_per_s, mib_per_s,
              static_cast<unsigned long long>(items));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Times stat / open+close / open+read+close / readdir / sequential read over a file list; one CSV line"};
  app.add_option("--op", a.op, "stat, open, read, readdir or seqread")->required();
  app.add_option("--path", a.path,
                 "Root directory the list is relative to (or the directory/file itself without --list)")
      ->required();
  app.add_option("--list", a.list,
                 "File with one relative path per line (read with the real libc, keep it off the mount)");
  app.add_option("--label", a.label, "First CSV column (e.g. tmpfs, disk, fanstore-raw)");
  app.add_option("--min-time", a.min_time, "Seconds of timed whole passes (at least one pass)")->capture_default_str();
  app.add_option("--warmup", a.warmup, "Untimed passes before timing")->capture_default_str();
  app.add_option("--threads", a.threads, "Threads, each timing its slice of the list")->capture_default_str();
  app.add_option("--block", a.block, "read(2) size in bytes")->capture_default_str();
  app.add_flag("--header", a.header, "Print the CSV header line first");
  CLI11_PARSE(app, argc, argv);
  return Run(a);
}
