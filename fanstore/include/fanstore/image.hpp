// Read side of a packed image: mmap'd index with O(1) lookups, precomputed listings, partition reads.
// The on-disk layout is specified in docs/format.md. An Image is immutable and safe to share between threads.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore {

enum class Codec : uint32_t { kRaw = 0, kZstd = 1 };

inline constexpr uint32_t kNoPartition = 0xFFFFFFFFu;  // directories hold no data
inline constexpr uint32_t kRootId = 0;                  // the image root is always entry 0

// A view of one index entry. Strings point into the mmap'd index and live as long as the Image.
struct Entry {
  uint32_t id = 0;
  uint32_t parent = 0;        // id of the containing directory (root's parent is root)
  std::string_view path;      // image-relative, e.g. "train/cat/0001.jpg"; "" for the root
  std::string_view name;      // last component; "" for the root
  uint32_t mode = 0;          // S_IFREG|0644 or S_IFDIR|0755 style, as packed (permission bits kept)
  uint64_t size = 0;          // file size in bytes (directories: the source directory's st_size, e.g. 4096)
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  uint64_t ino = 0;           // stable inode number (same image -> same number), never 0
  uint32_t nlink = 1;         // files 1, directories 2 + number of subdirectories
  uint32_t part = kNoPartition;
  Codec codec = Codec::kRaw;
  uint64_t offset = 0;        // byte offset of the stored bytes inside the partition file
  uint64_t stored_size = 0;   // bytes stored (== size when raw)
  uint64_t checksum = 0;      // XXH3-64 of the file's (uncompressed) content
  bool is_dir() const;
  bool is_reg() const;
  unsigned char d_type() const;  // DT_DIR / DT_REG
};

struct ImageSummary {
  uint32_t version = 0;
  uint64_t files = 0, dirs = 0;
  uint64_t bytes_in = 0;      // sum of file sizes
  uint64_t bytes_stored = 0;  // sum of stored sizes
  uint32_t parts = 0;         // regular partitions
  uint32_t replicated_part = kNoPartition;  // id of the partition every node keeps, if any
  std::vector<uint64_t> part_bytes;         // stored bytes per partition (regular + replicated)
  std::vector<uint64_t> part_files;         // files per partition
};

struct ImageOpenOptions {
  // Where the partition files are read from; empty = the image directory itself.
  // A daemon's staging directory (multi-node) holds only some partitions: the rest read as missing.
  std::string partition_dir;
};

class Image {
 public:
  // Opens the image directory `dir` (index + partitions). Validates magic, version, sizes and the
  // index checksum; refuses a corrupt, truncated or newer-version index with one actionable line.
  static Result<std::shared_ptr<const Image>> Open(const std::string& dir, const ImageOpenOptions& opts = {});
  ~Image();
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;

  const std::string& dir() const;
  uint64_t size() const;  // number of entries (files + directories, root included)
  Entry Get(uint32_t id) const;                         // id < size()
  Result<uint32_t> Lookup(std::string_view rel) const;  // normalised rel path ("" = root); O(1)
  // Children of a directory, sorted by name (bytewise). Empty for files.
  uint32_t ChildCount(uint32_t dir_id) const;
  uint32_t Child(uint32_t dir_id, uint32_t i) const;  // i < ChildCount
  ImageSummary Summary() const;

  // Partition files: part id -> path under partition_dir (or dir). True when it is present and
  // readable here (multi-node: only the staged ones are).
  std::string PartitionPath(uint32_t part) const;
  bool HasPartition(uint32_t part) const;
  uint32_t PartitionCount() const;  // regular + replicated

  // Reads the stored bytes of file `id` (compressed as packed) from its local partition into `out`.
  Status ReadStored(uint32_t id, std::string* out) const;
  // Zero-copy view of a raw-stored (uncompressed) file in its local partition: a read-only mapping of
  // the partition range, checksum verified before it is returned (kCorrupt otherwise). The page cache
  // already holds those bytes, so large files are served without a decoded copy. kUnsupported for a
  // compressed file. The caller munmaps [base, base + length). The image is immutable by contract:
  // truncating a partition file while it is mapped would fault the reader (SIGBUS).
  struct Mapping {
    void* base = nullptr;
    size_t length = 0;
    const char* data = nullptr;  // the file's first byte, inside the mapping
  };
  Result<Mapping> MapRawFile(uint32_t id) const;
  // Reads and decodes file `id` into `out` (exactly Get(id).size bytes), streaming for huge files,
  // and checks the XXH3 checksum: a mismatch is kCorrupt naming the file, and `out` must not be used.
  Status ReadFile(uint32_t id, void* out) const;
  // Decodes file `id` from its local partition in constant memory and checks its checksum (verify).
  Status CheckFile(uint32_t id) const;
  // The 64-bit content hash every partition of this image carries in its header.
  uint64_t ImageId() const;

  struct Impl;
 private:
  explicit Image(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Decodes stored bytes (e.g. received from a remote daemon) of entry `e` into `out` (e.size bytes)
// and checks the checksum. Shared by every read path so they all fail the same way.
Status DecodeStored(const Entry& e, const void* stored, size_t stored_size, void* out);

// Verifies every file's checksum. Calls `bad` once per corrupt/unreadable file with a one-line reason.
// Returns the number of bad files (0 = the image is sound).
uint64_t VerifyImage(const Image& img, int threads,
                     const std::function<void(const Entry&, const Status&)>& bad);

}  // namespace fanstore
