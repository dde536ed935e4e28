// Write side: turns a directory tree into an image (index + balanced partitions of zstd-compressed chunks),
// and converts images of an older format.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore {

struct PackOptions {
  std::string source;                  // directory to pack
  std::string output;                  // image directory to create (must not exist or be empty)
  uint32_t parts = 1;                  // regular partitions, balanced by bytes
  int level = 3;                       // zstd level; files that do not shrink are stored raw; 0: all raw (--level 0)
  std::vector<std::string> replicate;  // globs on relative paths -> the replicated partition
  int threads = 0;                     // 0 = all cores
  uint32_t chunk_size = 1u << 20;      // bytes per chunk: a power of two, 64 KiB .. 64 MiB (--chunk)
  bool follow_symlinks = false;        // store what links point at instead of the links (--follow-symlinks)
  bool strict = false;                 // refuse FIFOs, sockets and device nodes instead of skipping them
  // Set to true (by another thread, or a signal handler: a lock-free store) to stop: the pack ends at its next
  // directory or chunk, removes its temporary directory and fails with "interrupted". Null: never.
  const std::atomic<bool>* stop = nullptr;
};

struct PackProgress {
  uint64_t files_done = 0, files_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;
};

struct PackReport {
  uint64_t files = 0, dirs = 0, links = 0, skipped = 0;  // links: symlinks kept as symlinks
  uint64_t bytes_in = 0, bytes_stored = 0;
  double seconds = 0;
};

// Packs opts.source into opts.output. `progress` (may be empty) is called from one thread now and then;
// `warn` (may be empty) gets one line counting the special files skipped, one per dangling link and loop skipped
// with follow_symlinks, and one per
// temporary directory an earlier pack into the same output left behind (killed, so it could not remove it).
// On failure nothing that looks like a valid image is left behind: the temporary directory is removed.
Result<PackReport> Pack(const PackOptions& opts, const std::function<void(const PackProgress&)>& progress = {},
                        const std::function<void(const std::string&)>& warn = {});

// Rewrites the image at opts.source, made by an older fanstore (format version 1), as a current image at
// opts.output with the same tree, stat data and bytes (every old file checksum is verified on the way;
// a damaged file fails the conversion naming it). parts/replicate are taken from the old image;
// level/threads/chunk_size from opts. An image that is already current is kInvalidArgument.
Result<PackReport> Convert(const PackOptions& opts, const std::function<void(const PackProgress&)>& progress = {},
                           const std::function<void(const std::string&)>& warn = {});

}  // namespace fanstore
