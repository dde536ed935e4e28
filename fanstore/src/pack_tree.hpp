// The in-memory tree pack builds before writing: compact per-entry records, one path arena, the chunk table.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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
  uint64_t size = 0;  // symlinks: the target's length
  uint32_t uid = 0, gid = 0;
  uint64_t blocks = 0;  // st_blocks of the source
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  uint32_t nlink = 1;
  uint32_t part = kNoPartition;
  Codec codec = Codec::kRaw;
  uint64_t offset = 0;  // symlinks: of the target in PackTree::targets
  uint64_t stored_size = 0;
  uint64_t checksum = 0;
  uint32_t child_first = 0;  // into PackTree::children
  uint32_t child_count = 0;
  uint64_t chunk_first = 0;    // files of more than one chunk: into PackTree::chunks
  uint32_t link_of = kNoLink;  // a hard link to an earlier file: that file's id (its bytes are stored once)
  static constexpr uint32_t kNoLink = 0xFFFFFFFFu;
  bool is_alias() const { return link_of != kNoLink; }
};

// One row of the chunk table (docs/format.md), for files of more than one chunk.
struct ChunkRecord {
  uint64_t stored_off = 0;  // from the file's offset
  uint32_t stored_size = 0;
  Codec codec = Codec::kRaw;
  uint64_t checksum = 0;
};

struct PackTree {
  std::string paths;                // every relative path, concatenated (no separators)
  std::string targets;              // every symlink target, concatenated; follows `paths` in the string table
  std::vector<PackNode> nodes;      // id order: pre-order walk, siblings sorted bytewise by name
  std::vector<uint32_t> children;   // per directory, contiguous, sorted by name
  std::vector<ChunkRecord> chunks;  // multi-chunk files, in file (partition, id) order
  uint64_t files = 0, dirs = 0, links = 0, skipped = 0;  // files: regular, hard links included; links: symlinks
  bool shared_libraries = false;  // a file named like one (*.so, *.so.*): the header's kFlagSharedLibraries
  std::string_view Path(const PackNode& n) const { return std::string_view(paths).substr(n.path_off, n.path_len); }
};

// Walks `source` into `tree` as docs/format.md "How pack builds the tree" says: symlinks kept (or followed with
// opts.follow_symlinks), hard links found, special files counted in one warning (refused with opts.strict).
// Fails on unreadable directories or files that cannot be stat'ed.
Status WalkSource(const PackOptions& opts, PackTree* tree, const std::function<void(const std::string&)>& warn);

struct PartitionInfo {
  std::string file_name;
  uint64_t stored_bytes = 0;
  uint64_t files = 0;
};

// What the index header needs besides the tree.
struct IndexMeta {
  uint32_t chunk_shift = 20;
  uint32_t regular_parts = 0;
  uint32_t replicated_part = kNoPartition;
  std::vector<PartitionInfo> parts;  // regular, then the replicated one if any
  uint64_t bytes_in = 0, bytes_stored = 0;
};

// The image id: XXH3-64 over everything the index says about content (entries, strings, partitions).
uint64_t ComputeImageId(const PackTree& tree, const IndexMeta& meta);
// Serialises the index (docs/format.md) into `out`, header last-patched with both checksums.
Status WriteIndex(const PackTree& tree, const IndexMeta& meta, uint64_t image_id, WritableFile* out);

// A source file's bytes, read front to back: pack reads the chunks of one file in order.
class SourceStream {
 public:
  virtual ~SourceStream() = default;
  // Fills buf with up to n bytes; fewer only at the end of the file. Errors name the file.
  virtual Result<size_t> Read(char* buf, size_t n) = 0;
};

// Where the bytes of the tree's files come from: the source directory, or an old image (convert).
class PackSource {
 public:
  virtual ~PackSource() = default;
  virtual Result<std::unique_ptr<SourceStream>> Open(const PackTree& tree, uint32_t id) = 0;
  // Names file `id` in messages ("SRC/a/b.jpg"), through Printable: one line whatever the name holds.
  virtual std::string Describe(const PackTree& tree, uint32_t id) const = 0;
};

// Files under a directory, read with read(2).
std::unique_ptr<PackSource> NewDirectorySource(const std::string& root);

// Pack with an injectable env (tests); Pack() uses DefaultWriteEnv().
Result<PackReport> PackWithEnv(const PackOptions& opts, WriteEnv* env,
                               const std::function<void(const PackProgress&)>& progress,
                               const std::function<void(const std::string&)>& warn);

// The back end shared by Pack and Convert: writes `tree` (whose file bytes `source` supplies) into a new
// image at opts.output. `assign_partitions`: balance files over opts.parts (and opts.replicate); false keeps
// each node's part (convert). Fills the report's counts.
Result<PackReport> WriteImage(const PackOptions& opts, PackTree* tree, PackSource* source, WriteEnv* env,
                              const std::function<void(const PackProgress&)>& progress, bool assign_partitions);

// Convert's entry: checks opts and the output, then WriteImage keeping the tree's partitions.
Result<PackReport> WriteImageKeepingPartitions(const PackOptions& opts, PackTree* tree, PackSource* source,
                                               const std::function<void(const PackProgress&)>& progress,
                                               const std::function<void(const std::string&)>& warn);

// What a pack stopped through PackOptions::stop fails with.
Status Interrupted();
inline bool Stopped(const std::atomic<bool>* stop) { return stop && stop->load(std::memory_order_relaxed); }

}  // namespace fanstore
