// Where a file installed with a program is looked for: relative to the running executable, so a prefix works
// wherever it is installed, moved or copied. Header-only: `fanstore run` uses it for the preload library and
// fanstore-train (which does not link the core library) for its CUDA module.
#pragma once

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace fanstore {

// The places of `file` beside this executable, in the order to try: ../lib (the build tree's bin/ and lib/),
// `install_rel` (an install's LIBDIR relative to its BINDIR, e.g. ../lib64), then the executable's own directory;
// normalised, without duplicates. Empty when /proc/self/exe cannot be read.
inline std::vector<std::string> PathsBesideProgram(const char* file, const char* install_rel) {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return {};
  exe[n] = '\0';
  const std::filesystem::path dir = std::filesystem::path(exe).parent_path();
  std::vector<std::string> paths;
  for (const char* rel : {"../lib", install_rel, "."}) {
    std::string p = (dir / rel / file).lexically_normal().string();
    if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(std::move(p));
  }
  return paths;
}

}  // namespace fanstore
