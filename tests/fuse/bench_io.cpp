// Benchmark driver (plain POSIX calls, so it runs unchanged on tmpfs, a FUSE mount or under the interposer):
//   fuse_bench_io read FILE [BLOCK]   sequential read of FILE with BLOCK-byte read() calls (default 1 MiB)
//   fuse_bench_io stat ROOT           stat() of ROOT/small/dXX/fYYYYY.txt, 100 x 100 files
//   fuse_bench_io walk ROOT           readdir of ROOT/small and its 100 subdirectories, stat of every entry
// Prints one line: "<mode> <ops> <bytes> <seconds> <rate>".
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int Read(const char* path, size_t block) {
  std::vector<char> buf(block);
  const double t0 = Now();
  const int fd = ::open(path, O_RDONLY);
  if (fd < 0) return std::perror(path), 1;
  uint64_t total = 0;
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) total += static_cast<uint64_t>(n);
  ::close(fd);
  const double dt = Now() - t0;
  if (n < 0) return std::perror("read"), 1;
  std::printf("read 1 %llu %.4f %.1f MiB/s\n", static_cast<unsigned long long>(total), dt,
              static_cast<double>(total) / (1 << 20) / dt);
  return 0;
}

int Stat(const std::string& root) {
  std::vector<std::string> paths;
  char name[64];
  for (int d = 0; d < 100; ++d)
    for (int f = 0; f < 100; ++f) {
      std::snprintf(name, sizeof name, "/small/d%02d/f%05d.txt", d, d * 100 + f);
      paths.push_back(root + name);
    }
  struct stat st;
  uint64_t bytes = 0;
  const double t0 = Now();
  for (const auto& p : paths) {
    if (::stat(p.c_str(), &st) != 0) return std::perror(p.c_str()), 1;
    bytes += static_cast<uint64_t>(st.st_size);
  }
  const double dt = Now() - t0;
  std::printf("stat %zu %llu %.4f %.0f stats/s\n", paths.size(), static_cast<unsigned long long>(bytes), dt,
              static_cast<double>(paths.size()) / dt);
  return 0;
}

int Walk(const std::string& root) {
  const double t0 = Now();
  uint64_t entries = 0, bytes = 0;
  std::vector<std::string> dirs = {root + "/small"};
  for (size_t i = 0; i < dirs.size(); ++i) {
    DIR* d = ::opendir(dirs[i].c_str());
    if (d == nullptr) return std::perror(dirs[i].c_str()), 1;
    while (const dirent* de = ::readdir(d)) {
      if (de->d_name[0] == '.') continue;
      const std::string p = dirs[i] + "/" + de->d_name;
      struct stat st;
      if (::stat(p.c_str(), &st) != 0) return std::perror(p.c_str()), 1;
      ++entries;
      if (S_ISDIR(st.st_mode)) dirs.push_back(p);
      else bytes += static_cast<uint64_t>(st.st_size);
    }
    ::closedir(d);
  }
  const double dt = Now() - t0;
  std::printf("walk %llu %llu %.4f %.0f entries/s\n", static_cast<unsigned long long>(entries),
              static_cast<unsigned long long>(bytes), dt, static_cast<double>(entries) / dt);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "read") == 0)
    return Read(argv[2], argc >= 4 ? std::strtoull(argv[3], nullptr, 10) : (1u << 20));
  if (argc == 3 && std::strcmp(argv[1], "stat") == 0) return Stat(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "walk") == 0) return Walk(argv[2]);
  std::fprintf(stderr, "usage: fuse_bench_io read FILE [BLOCK] | stat ROOT | walk ROOT\n");
  return 2;
}
