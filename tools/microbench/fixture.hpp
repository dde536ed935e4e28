// The data fanstore-microbench measures: a generated tree on tmpfs (the baseline) and the same tree packed as an image.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore::microbench {

struct Fixture {
  std::string dir;    // holds src/ and image/
  std::string src;    // the generated tree (tmpfs when /dev/shm is used)
  std::string image;  // src packed with zstd (compressible files) and raw (random files)
  // Image-relative paths, by kind. Text is ~3:1 compressible (stored zstd); random bytes are stored raw.
  std::vector<std::string> small;  // 4 KiB text files in 10 directories
  std::vector<std::string> mid;    // 128 KiB text files
  std::vector<std::string> raw;    // 128 KiB random files
  std::string big;                 // one 4 MiB text file
};

inline constexpr uint64_t kSmallBytes = 4 << 10, kMidBytes = 128 << 10, kBigBytes = 4 << 20;

// The names of a fixture rooted at `dir` (pure: the child process under the preload rebuilds them this way).
Fixture DescribeFixture(const std::string& dir);
// Writes the tree (deterministic bytes) and packs it with fanstore::Pack.
Status MakeFixture(const Fixture& f);

}  // namespace fanstore::microbench
