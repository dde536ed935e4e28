// fanstore-microbench: Google Benchmark micro-benchmarks of FanStore's hot paths, each next to a baseline measured in
// the same run: the core's lookup/decode/checksum in process, then the interposer's stat/open/read in a child under
// `fanstore run` (the `fanstore` next to this binary), with the same calls on the tmpfs source tree as the baseline.
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "benchmarks.hpp"
#include "fanstore/env.hpp"

namespace {

using fanstore::microbench::Fixture;

constexpr const char* kUsage =
    "usage: fanstore-microbench [--dir DIR] [--keep] [--json PREFIX] [--benchmark_filter=REGEX] "
    "[--benchmark_min_time=SECONDS] [other --benchmark_* flags]\n"
    "  --dir DIR      where the tree and its image are made (default: a new directory in /dev/shm, else $TMPDIR)\n"
    "  --keep         keep that directory\n"
    "  --json PREFIX  also write PREFIX.core.json (core + tmpfs) and PREFIX.interpose.json (under the preload)\n";

struct Args {
  std::string dir, json, child_dir;  // child_dir: set in the child started under `fanstore run`
  bool keep = false;
  std::vector<std::string> benchmark_flags;
};

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (s == "--dir") {
      if (!value(&a->dir)) return false;
    } else if (s == "--json") {
      if (!value(&a->json)) return false;
    } else if (s == "--interpose-child") {
      if (!value(&a->child_dir)) return false;
    } else if (s == "--keep") {
      a->keep = true;
    } else if (s.rfind("--benchmark_", 0) == 0) {
      a->benchmark_flags.push_back(s);
    } else {
      return false;
    }
  }
  return true;
}

std::string SelfPath() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  return buf;
}

// Google Benchmark parses its own flags from an argv; ours are already removed.
void RunBenchmarks(const std::vector<std::string>& flags, const std::string& json_out) {
  std::vector<std::string> args{"fanstore-microbench"};
  args.insert(args.end(), flags.begin(), flags.end());
  if (!json_out.empty()) {
    args.push_back("--benchmark_out=" + json_out);
    args.push_back("--benchmark_out_format=json");
  }
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  int argc = static_cast<int>(argv.size());
  benchmark::Initialize(&argc, argv.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}

// The child: this process runs under libfanstore_preload.so with the image at FANSTORE_MOUNT.
int RunInterposeChild(const Args& a) {
  const char* image = std::getenv(fanstore::env::kImage);
  const char* mount = std::getenv(fanstore::env::kMount);
  if (image == nullptr || *image == '\0' || mount == nullptr || *mount == '\0') {
    std::fprintf(stderr,
                 "fanstore-microbench: --interpose-child runs only under `fanstore run` (FANSTORE_IMAGE unset)\n");
    return 2;
  }
  Fixture f = fanstore::microbench::DescribeFixture(a.child_dir);
  fanstore::microbench::RegisterPosixBenchmarks(f, "interpose", mount);
  // Paths that are not the image's: the price every other file access pays for the preload being there.
  fanstore::microbench::RegisterPosixBenchmarks(f, "passthrough", f.src);
  RunBenchmarks(a.benchmark_flags, a.json.empty() ? "" : a.json + ".interpose.json");
  return 0;
}

int RunChildUnderPreload(const Args& a, const Fixture& f) {
  std::string self = SelfPath();
  std::string fanstore = self.substr(0, self.rfind('/')) + "/fanstore";
  if (::access(fanstore.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "fanstore-microbench: %s not found: the interposer benchmarks need the fanstore CLI next to "
                 "this binary (build the `fanstore` target)\n",
                 fanstore.c_str());
    return 1;
  }
  std::vector<std::string> args{fanstore, "run", "--image",           f.image, "--mount", "/fanstore",
                                "--",     self,  "--interpose-child", f.dir};
  if (!a.json.empty()) args.insert(args.end(), {"--json", a.json});
  args.insert(args.end(), a.benchmark_flags.begin(), a.benchmark_flags.end());
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "fanstore-microbench: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "fanstore-microbench: the interposer benchmarks under `fanstore run` failed (status %d)\n",
                 status);
    return 1;
  }
  return 0;
}

std::string DefaultDir() {
  std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "";
  if (base.empty()) {
    const char* t = std::getenv("TMPDIR");
    base = (t != nullptr && *t != '\0') ? t : "/tmp";
  }
  std::string tmpl = base + "/fanstore-microbench-XXXXXX";
  return ::mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!Parse(argc, argv, &a)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (!a.child_dir.empty()) return RunInterposeChild(a);

  const bool made_dir = a.dir.empty();
  if (made_dir) a.dir = DefaultDir();
  if (a.dir.empty()) {
    std::fprintf(stderr, "fanstore-microbench: cannot create a scratch directory: %s (give --dir)\n",
                 std::strerror(errno));
    return 1;
  }
  std::error_code ec;
  if (!made_dir && std::filesystem::exists(a.dir + "/src", ec)) {
    std::fprintf(stderr, "fanstore-microbench: %s/src exists: give an empty or new --dir\n", a.dir.c_str());
    return 1;
  }
  Fixture f = fanstore::microbench::DescribeFixture(a.dir);
  int rc = 0;
  std::fprintf(stderr, "fanstore-microbench: tree and image in %s\n", a.dir.c_str());
  if (auto s = fanstore::microbench::MakeFixture(f); !s.ok()) {
    std::fprintf(stderr, "fanstore-microbench: cannot make the test tree: %s\n", s.ToString().c_str());
    rc = 1;
  } else {
    std::string error;
    if (!fanstore::microbench::RegisterCoreBenchmarks(f, &error)) {
      std::fprintf(stderr, "fanstore-microbench: %s\n", error.c_str());
      rc = 1;
    } else {
      fanstore::microbench::RegisterPosixBenchmarks(f, "tmpfs", f.src);
      RunBenchmarks(a.benchmark_flags, a.json.empty() ? "" : a.json + ".core.json");
      rc = RunChildUnderPreload(a, f);
    }
  }
  if (!a.keep) {
    std::filesystem::remove_all(made_dir ? a.dir : f.src, ec);
    if (!made_dir) std::filesystem::remove_all(f.image, ec);
  }
  return rc;
}
