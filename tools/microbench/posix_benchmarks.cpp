// stat/open/read with plain libc calls on a tree: on tmpfs these are the baseline; run under `fanstore run` on the
// mount prefix they are the interposer's hot paths (classify the path, look it up, hand out and serve an fd).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

#include "benchmarks.hpp"

namespace fanstore::microbench {
namespace {

std::vector<std::string> Under(const std::string& root, const std::vector<std::string>& rel) {
  std::vector<std::string> out;
  for (const auto& r : rel) out.push_back(root + "/" + r);
  return out;
}

// open + read until EOF + close, as a data loader reads a sample.
void ReadWhole(benchmark::State& s, const std::vector<std::string>& paths, uint64_t bytes) {
  std::vector<char> buf(bytes + 4096);
  size_t i = 0;
  for (auto _ : s) {
    int fd = ::open(paths[i++ % paths.size()].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      s.SkipWithError(("open " + paths[(i - 1) % paths.size()] + ": " + std::strerror(errno)).c_str());
      break;
    }
    uint64_t got = 0;
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) got += static_cast<uint64_t>(n);
    ::close(fd);
    if (got != bytes) {
      s.SkipWithError("short read");
      break;
    }
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * bytes));
}

}  // namespace

void RegisterPosixBenchmarks(const Fixture& f, const std::string& group, const std::string& root) {
  auto small = std::make_shared<std::vector<std::string>>(Under(root, f.small));
  auto mid = std::make_shared<std::vector<std::string>>(Under(root, f.mid));
  auto big = std::make_shared<std::vector<std::string>>(Under(root, {f.big}));
  benchmark::RegisterBenchmark((group + "/stat").c_str(), [small](benchmark::State& s) {
    struct stat st;
    size_t i = 0;
    for (auto _ : s) {
      if (::stat((*small)[i++ % small->size()].c_str(), &st) != 0) {
        s.SkipWithError(std::strerror(errno));
        break;
      }
      benchmark::DoNotOptimize(st);
    }
  });
  benchmark::RegisterBenchmark((group + "/open+close").c_str(), [small](benchmark::State& s) {
    size_t i = 0;
    for (auto _ : s) {
      int fd = ::open((*small)[i++ % small->size()].c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        s.SkipWithError(std::strerror(errno));
        break;
      }
      ::close(fd);
    }
  });
  benchmark::RegisterBenchmark((group + "/read 4KiB").c_str(),
                               [small](benchmark::State& s) { ReadWhole(s, *small, kSmallBytes); });
  benchmark::RegisterBenchmark((group + "/read 128KiB").c_str(),
                               [mid](benchmark::State& s) { ReadWhole(s, *mid, kMidBytes); });
  benchmark::RegisterBenchmark((group + "/read 4MiB").c_str(),
                               [big](benchmark::State& s) { ReadWhole(s, *big, kBigBytes); });
}

}  // namespace fanstore::microbench
