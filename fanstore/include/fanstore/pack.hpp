// Write side: turns a directory tree into an image (index + balanced, zstd-compressed partitions).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore {

struct PackOptions {
  std::string source;                   // directory to pack
  std::string output;                   // image directory to create (must not exist or be empty)
  uint32_t parts = 1;                   // regular partitions, balanced by bytes
  int level = 3;                        // zstd level; files that do not shrink are stored raw
  std::vector<std::string> replicate;   // globs on relative paths -> the replicated partition
  int threads = 0;                      // 0 = all cores
  bool compress = true;                 // false: store everything raw (--level 0)
};

struct PackProgress {
  uint64_t files_done = 0, files_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;
};

struct PackReport {
  uint64_t files = 0, dirs = 0, skipped = 0;
  uint64_t bytes_in = 0, bytes_stored = 0;
  double seconds = 0;
};

// Packs opts.source into opts.output. `progress` (may be empty) is called from one thread now and then;
// `warn` (may be empty) gets one line per skipped entry (special files, dangling links, loops).
// On failure nothing that looks like a valid image is left behind.
Result<PackReport> Pack(const PackOptions& opts, const std::function<void(const PackProgress&)>& progress = {},
                        const std::function<void(const std::string&)>& warn = {});

}  // namespace fanstore
