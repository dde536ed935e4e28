// Implementation of the shared benchmark helpers (clock, file lists, whole-file reads).
#include "bench_util.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

namespace fanstore::bench {

double NowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool ReadFileList(const std::string& list_file, const std::string& root, std::vector<std::string>& out,
                  std::string& error) {
  std::ifstream in(list_file);
  if (!in) {
    error = "cannot read file list '" + list_file + "'";
    return false;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    out.push_back(root + "/" + line);
  }
  if (out.empty()) {
    error = "file list '" + list_file + "' is empty";
    return false;
  }
  return true;
}

int64_t ReadWholeFile(const std::string& path, std::vector<char>& buffer) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int64_t total = 0;
  for (;;) {
    ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      errno = err;
      return -1;
    }
    if (n == 0) break;
    total += n;
  }
  close(fd);
  return total;
}

std::pair<size_t, size_t> SliceRange(size_t n, size_t parts, size_t i) {
  size_t base = n / parts, extra = n % parts;
  size_t begin = i * base + (i < extra ? i : extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

}  // namespace fanstore::bench
