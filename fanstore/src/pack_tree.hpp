// The in-memory tree pack builds before writing: compact per-entry records and one path arena.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fanstore/image.hpp"
#include "fanstore/pack.hpp"
#include "fanstore/status.hpp"
#include "write_env.hpp"

namespace fanstore {

// One entry, kept small (no std::string) so a million files stay cheap; mirrors the on-disk record.
struct PackNode {
  uint64_t path_off = 0;  // into PackTree::paths
  uint32_t path_len = 0;
  uint32_t name_off = 0;  // offset of the last component inside the path
  uint32_t parent = 0;
  uint32_t mode = 0;
  uint64_t size = 0;
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  uint32_t nlink = 1;
  uint32_t part = kNoPartition;
  Codec codec = Codec::kRaw;
  uint64_t offset = 0;
  uint64_t stored_size = 0;
  uint64_t checksum = 0;
  uint32_t child_first = 0;  // into PackTree::children
  uint32_t child_count = 0;
};

struct PackTree {
  std::string paths;                // every relative path, concatenated (no separators)
  std::vector<PackNode> nodes;      // id order: pre-order walk, siblings sorted bytewise by name
  std::vector<uint32_t> children;   // per directory, contiguous, sorted by name
  uint64_t files = 0, dirs = 0, skipped = 0;
  std::string_view Path(const PackNode& n) const { return std::string_view(paths).substr(n.path_off, n.path_len); }
};

// Walks `source` (following symlinks, skipping special files, dangling links and directory loops with a
// warning each) into `tree`. Fails on unreadable directories or files that cannot be stat'ed.
Status WalkSource(const std::string& source, PackTree* tree, const std::function<void(const std::string&)>& warn);

struct PartitionInfo {
  std::string file_name;
  uint64_t stored_bytes = 0;
  uint64_t files = 0;
};

// What the index header needs besides the tree.
struct IndexMeta {
  uint32_t regular_parts = 0;
  uint32_t replicated_part = kNoPartition;
  std::vector<PartitionInfo> parts;  // regular, then the replicated one if any
  uint64_t bytes_in = 0, bytes_stored = 0;
};

// The image id: XXH3-64 over everything the index says about content (entries, strings, partitions).
uint64_t ComputeImageId(const PackTree& tree, const IndexMeta& meta);
// Serialises the index (docs/format.md) into `out`, header last-patched with both checksums.
Status WriteIndex(const PackTree& tree, const IndexMeta& meta, uint64_t image_id, WritableFile* out);

// Pack with an injectable env (tests); Pack() uses DefaultWriteEnv().
Result<PackReport> PackWithEnv(const PackOptions& opts, WriteEnv* env,
                               const std::function<void(const PackProgress&)>& progress,
                               const std::function<void(const std::string&)>& warn);

}  // namespace fanstore
