// fanstore-largefile: the large-file cases (head read, random preads, sequential read, N mappers) with plain POSIX
// calls (so it runs through the interposer unchanged): a short head read, random preads, a sequential read, N processes
// mapping one file, and a fresh process's first stat (the index open). One CSV line per run:
// label,mode,value,unit[,extra].
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <xxhash.h>
#include <CLI/CLI.hpp>
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>

#include "bench_util.hpp"

namespace {

struct Args {
  std::string mode, path, label = "run";
  double t0 = 0;  // stat-child: when the parent was about to exec us
  size_t block = 4096;
  uint64_t ops = 20000;
  int procs = 4;
  uint64_t seed = 1;
};

int Fail(const std::string& what) {
  std::fprintf(stderr, "fanstore-largefile: %s: %s\n", what.c_str(), std::strerror(errno));
  return 1;
}

// open + read `block` bytes + close: the time of the whole sequence and this process's peak RSS.
int Head(const Args& a) {
  std::vector<char> buf(a.block);
  double t0 = fanstore::bench::NowSeconds();
  int fd = open(a.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail("open " + a.path);
  ssize_t n = read(fd, buf.data(), buf.size());
  close(fd);
  double t1 = fanstore::bench::NowSeconds();
  if (n < 0) return Fail("read");
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::printf("%s,head,%.3f,ms,%ld\n", a.label.c_str(), (t1 - t0) * 1e3, ru.ru_maxrss);
  return 0;
}

// Random block-aligned preads over the whole file (one open): nanoseconds per pread. A first pass of the same
// count, untimed, warms whatever caches the system under test has (page cache, decoded chunks).
int Pread(const Args& a) {
  int fd = open(a.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail("open " + a.path);
  struct stat st;
  fstat(fd, &st);
  const uint64_t blocks = static_cast<uint64_t>(st.st_size) / a.block;
  if (blocks == 0) return Fail("file smaller than one block");
  std::vector<char> buf(a.block);
  double secs = 0;
  for (int pass = 0; pass < 2; ++pass) {
    std::mt19937_64 rng(a.seed);
    double t0 = fanstore::bench::NowSeconds();
    for (uint64_t i = 0; i < a.ops; ++i)
      if (pread(fd, buf.data(), a.block, static_cast<off_t>((rng() % blocks) * a.block)) !=
          static_cast<ssize_t>(a.block))
        return Fail("pread");
    secs = fanstore::bench::NowSeconds() - t0;
  }
  close(fd);
  std::printf("%s,pread,%.1f,ns/op\n", a.label.c_str(), secs * 1e9 / static_cast<double>(a.ops));
  return 0;
}

// One sequential pass with read(2) of `block` bytes: MiB/s.
int Seq(const Args& a) {
  std::vector<char> buf(a.block);
  double t0 = fanstore::bench::NowSeconds();
  int fd = open(a.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail("open " + a.path);
  uint64_t total = 0;
  for (ssize_t n; (n = read(fd, buf.data(), buf.size())) != 0;) {
    if (n < 0) return Fail("read");
    total += static_cast<uint64_t>(n);
  }
  close(fd);
  double secs = fanstore::bench::NowSeconds() - t0;
  std::printf("%s,seq,%.1f,MiB/s,%llu\n", a.label.c_str(), static_cast<double>(total) / secs / 1048576.0,
              static_cast<unsigned long long>(total));
  return 0;
}

// Proportional set size of a process (kB), from smaps_rollup: shared pages count once in total over sharers.
long Pss(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Pss:", 0) == 0) return std::stol(line.substr(4));
  return -1;
}

// `procs` processes each open the file, mmap it and touch every page, then wait; the total PSS of those
// processes minus `procs` times that of an identical process that maps nothing: the memory the mappings cost.
int Map(const Args& a, bool map_it) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return Fail("pipe");
  std::vector<pid_t> kids;
  for (int p = 0; p < a.procs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      close(go[1]);
      volatile char sink = 0;
      if (map_it) {
        int fd = open(a.path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) _exit(2);
        void* m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) _exit(3);
        for (off_t o = 0; o < st.st_size; o += 4096) sink = sink + static_cast<const char*>(m)[o];
      }
      char c = 1;
      if (write(ready[1], &c, 1) != 1) _exit(4);
      (void)!read(go[0], &c, 1);  // hold the mapping until the parent has measured
      _exit(sink == 42 ? 5 : 0);
    }
    kids.push_back(pid);
  }
  close(ready[1]);
  close(go[0]);
  for (int p = 0; p < a.procs; ++p) {
    char c;
    if (read(ready[0], &c, 1) != 1) return Fail("child failed before mapping");
  }
  long total = 0;
  for (pid_t k : kids) total += Pss(k);
  close(go[1]);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  std::printf("%s,%s,%.1f,MiB\n", a.label.c_str(), map_it ? "map" : "map-baseline",
              static_cast<double>(total) / 1024.0);
  return 0;
}

// A fresh process's first stat: fork + exec of this program, whose main stats `path` and prints the time since
// the parent was about to exec it (exec, loading, the preload library opening the image, the stat).
int FreshStat(const Args& a, const char* self) {
  char t0[64];
  std::snprintf(t0, sizeof t0, "%.9f", fanstore::bench::NowSeconds());
  pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, "--mode", "stat-child", "--path", a.path.c_str(), "--label", a.label.c_str(), "--t0", t0,
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int StatChild(const Args& a) {
  struct stat st;
  if (stat(a.path.c_str(), &st) != 0) return Fail("stat " + a.path);
  std::printf("%s,fresh-stat,%.2f,ms\n", a.label.c_str(), (fanstore::bench::NowSeconds() - a.t0) * 1e3);
  return 0;
}

// What the ways of serving a raw stored file from a page-cached partition cost per GiB (--path: a large file):
// (a) map it, verify it once, then serve every read by memcpy from the mapping (FanStore before format 2: fast,
// but a truncation is SIGBUS and a later in-place change is served unverified); (b) pread into the reader's
// buffer and verify that chunk every time (now); (c) a plain pread, as tmpfs/ext4 serve it.
int VerifyCost(const Args& a) {
  int fd = open(a.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail("open " + a.path);
  const off_t n = lseek(fd, 0, SEEK_END);
  const size_t b = a.block;
  std::vector<char> out(b);
  volatile uint64_t h = 0;
  double t0 = fanstore::bench::NowSeconds();
  char* m = static_cast<char*>(mmap(nullptr, static_cast<size_t>(n), PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0));
  if (m == MAP_FAILED) return Fail("mmap");
  h = XXH3_64bits_dispatch(m, static_cast<size_t>(n));
  double t1 = fanstore::bench::NowSeconds();
  for (off_t o = 0; o + static_cast<off_t>(b) <= n; o += static_cast<off_t>(b)) std::memcpy(out.data(), m + o, b);
  double t2 = fanstore::bench::NowSeconds();
  munmap(m, static_cast<size_t>(n));
  for (off_t o = 0; o + static_cast<off_t>(b) <= n; o += static_cast<off_t>(b)) {
    if (pread(fd, out.data(), b, o) != static_cast<ssize_t>(b)) return Fail("pread");
    h = h + XXH3_64bits_dispatch(out.data(), b);
  }
  double t3 = fanstore::bench::NowSeconds();
  for (off_t o = 0; o + static_cast<off_t>(b) <= n; o += static_cast<off_t>(b))
    if (pread(fd, out.data(), b, o) != static_cast<ssize_t>(b)) return Fail("pread");
  double t4 = fanstore::bench::NowSeconds();
  close(fd);
  const double gib = static_cast<double>(n) / 1073741824.0;
  std::printf(
      "%s,verify-cost,%.0f,ms/GiB map+verify once,%.0f,ms/GiB per pass from the mapping,%.0f,"
      "ms/GiB pread+verify,%.0f,ms/GiB pread\n",
      a.label.c_str(), (t1 - t0) / gib * 1e3, (t2 - t1) / gib * 1e3, (t3 - t2) / gib * 1e3, (t4 - t3) / gib * 1e3);
  return h == 42 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{
      "Large-file cases: head (open+read+close, ms and peak RSS), pread (random, ns/op), seq (MiB/s), "
      "map (N processes mapping one file: total PSS MiB), map-baseline (the same processes mapping nothing), "
      "fresh-stat (exec a fresh process whose first call stats --path: ms), verify-cost (ways to serve a "
      "raw file from the page cache, ms/GiB)"};
  app.add_option("--mode", a.mode, "head, pread, seq, map, map-baseline, fresh-stat or verify-cost")->required();
  app.add_option("--path", a.path, "The file")->required();
  app.add_option("--label", a.label, "First CSV column");
  app.add_option("--block", a.block, "Bytes per read")->capture_default_str();
  app.add_option("--ops", a.ops, "preads per pass (pread)")->capture_default_str();
  app.add_option("--procs", a.procs, "Processes (map)")->capture_default_str();
  app.add_option("--seed", a.seed, "Offsets' seed (pread)")->capture_default_str();
  app.add_option("--t0", a.t0, "(internal) the parent's clock at exec (stat-child)");
  CLI11_PARSE(app, argc, argv);
  if (a.mode == "head") return Head(a);
  if (a.mode == "pread") return Pread(a);
  if (a.mode == "seq") return Seq(a);
  if (a.mode == "map" || a.mode == "map-baseline") return Map(a, a.mode == "map");
  if (a.mode == "fresh-stat") return FreshStat(a, "/proc/self/exe");
  if (a.mode == "stat-child") return StatChild(a);
  if (a.mode == "verify-cost") return VerifyCost(a);
  std::fprintf(stderr, "fanstore-largefile: unknown --mode %s\n", a.mode.c_str());
  return 2;
}
