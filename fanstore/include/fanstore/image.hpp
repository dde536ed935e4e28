// Read side of a packed image: mmap'd index with O(1) lookups, precomputed listings, chunked partition reads.
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

// kChunked: the file has more than one chunk; each chunk names its own codec. kZero: a chunk of zero bytes, stored
// as nothing (holes of sparse files, and any chunk that is all zeros).
enum class Codec : uint32_t { kRaw = 0, kZstd = 1, kChunked = 2, kZero = 3 };

inline constexpr uint32_t kNoPartition = 0xFFFFFFFFu;  // directories hold no data
inline constexpr uint32_t kRootId = 0;                 // the image root is always entry 0
inline constexpr uint32_t kNoOwner = 0xFFFFFFFFu;      // uid/gid of a version-2 image, which stores none
inline constexpr uint64_t kNoBlocks = ~uint64_t{0};    // st_blocks of a version-2 image, which stores none

// A view of one index entry. Strings point into the mmap'd index and live as long as the Image. Nothing in
// it is trusted: every read path checks the fields it uses (Image::GetChunk) before using them.
struct Entry {
  uint32_t id = 0;
  uint32_t parent = 0;      // id of the containing directory (root's parent is root)
  std::string_view path;    // image-relative, e.g. "train/cat/0001.jpg"; "" for the root
  std::string_view name;    // last component; "" for the root
  uint32_t mode = 0;        // S_IFREG, S_IFDIR or S_IFLNK plus the permission bits, as packed
  uint64_t size = 0;        // file size in bytes (directories: the source's st_size, e.g. 4096; symlinks: the
                            // target's length)
  uint32_t uid = kNoOwner;  // owner as packed; kNoOwner in a version-2 image
  uint32_t gid = kNoOwner;
  uint64_t blocks = kNoBlocks;  // the source's st_blocks (512-byte units: holes take none); kNoBlocks in version 2
  int64_t mtime_sec = 0;
  uint32_t mtime_nsec = 0;
  uint64_t ino = 0;    // stable inode number (same image -> same number), never 0; shared by hard links
  uint32_t nlink = 1;  // files: their hard links in the image; directories 2 + number of subdirectories
  uint32_t part = kNoPartition;
  Codec codec = Codec::kRaw;  // of the one chunk, or kChunked
  uint64_t offset = 0;        // byte offset of the file's stored bytes (all its chunks) inside the partition file
                              // (symlinks: of the target in the string table; Image::LinkTarget reads it)
  uint64_t stored_size = 0;   // bytes stored for the whole file
  uint64_t checksum = 0;      // XXH3-64 of the file's whole (uncompressed) content
  uint64_t chunk_first = 0;   // kChunked files: index of the first chunk record
  bool is_dir() const;
  bool is_reg() const;
  bool is_link() const;
  unsigned char d_type() const;  // DT_DIR / DT_REG / DT_LNK
};

// One chunk of a file: its decoded bytes are [raw_offset, raw_offset + raw_size) of the file; its stored bytes
// [offset, offset + stored_size) of the partition file. Every field was checked against the entry and the
// image's limits by Image::GetChunk, so raw_size never exceeds the chunk size.
struct Chunk {
  uint64_t index = 0;
  uint64_t raw_offset = 0;
  uint32_t raw_size = 0;
  uint64_t offset = 0;  // absolute, in the partition file
  uint32_t stored_size = 0;
  Codec codec = Codec::kRaw;  // kRaw, kZstd or kZero
  uint64_t checksum = 0;      // XXH3-64 of the decoded bytes
  uint64_t key = 0;           // unique per chunk of the image (node-chunk-cache slot): entry id for a one-chunk
                              // file, else entry count + chunk table index
};

struct ImageSummary {
  uint32_t version = 0;
  uint64_t files = 0, dirs = 0, links = 0;  // links: symlinks (hard links count as files)
  uint64_t bytes_in = 0;                    // sum of file sizes
  uint64_t bytes_stored = 0;                // sum of stored sizes
  uint32_t chunk_size = 0;
  uint64_t chunks = 0;                      // chunk table records (chunks of multi-chunk files)
  uint32_t parts = 0;                       // regular partitions
  uint32_t replicated_part = kNoPartition;  // id of the partition every node keeps, if any
  std::vector<uint64_t> part_bytes;         // stored bytes per partition (regular + replicated)
  std::vector<uint64_t> part_files;         // files per partition
};

struct ImageOpenOptions {
  // Where the partition files are read from; empty = the image directory itself.
  // A daemon's staging directory (multi-node) holds only some partitions: the rest read as missing.
  std::string partition_dir;
  // A token from Image::TrustToken() of an earlier, fully checked open of the same index file (handed down
  // by `fanstore run` in FANSTORE_INDEX_TRUST). When it names this very file (device, inode, size, mtime,
  // ctime) and its body checksum, the body is not hashed again: a fresh process opens a 10M-file index
  // without reading all of it. Anything else (empty, stale, malformed) means a full check.
  std::string trust_token;
  // The index file to map instead of DIR/index.fsi: a private copy (`fanstore run`'s in the node chunk cache,
  // `fanstore mount`'s in a memfd), which a `cp` or `rsync --inplace` over the image cannot change under a
  // reader; the partitions are still read from the image. Empty: DIR/index.fsi.
  std::string index_file;
};

class Image {
 public:
  // Opens the image directory `dir` (index + partitions). Validates magic, version, sizes and the
  // index checksum; refuses a corrupt, truncated, older- or newer-version index with one actionable line.
  static Result<std::shared_ptr<const Image>> Open(const std::string& dir, const ImageOpenOptions& opts = {});
  ~Image();
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;

  const std::string& dir() const;
  // The index file this image maps (DIR/index.fsi, or ImageOpenOptions::index_file).
  const std::string& IndexFile() const;
  uint64_t size() const;         // number of entries (files + directories, root included)
  Entry Get(uint32_t id) const;  // id < size()
  // Normalised rel path ("" = root) -> its entry, in O(1). Symlinks are entries like any other: nothing is
  // followed here (Client::Resolve follows them): a path through a symlink is kNotDirectory.
  Result<uint32_t> Lookup(std::string_view rel) const;
  // The target of symlink `e`, verbatim (relative or absolute). kCorrupt if `e` is not a symlink or the index
  // places its target outside the string table.
  Result<std::string_view> LinkTarget(const Entry& e) const;
  // Children of a directory, sorted by name (bytewise). Empty for files.
  uint32_t ChildCount(uint32_t dir_id) const;
  uint32_t Child(uint32_t dir_id, uint32_t i) const;  // i < ChildCount
  ImageSummary Summary() const;
  // Whether pack saw a file named like a shared library (*.so, *.so.*): `fanstore run` then loads the loader's
  // audit module (interpose/audit.cpp). False for a version-2 image.
  bool HoldsSharedLibraries() const;
  // The 64-bit content hash every partition of this image carries in its header.
  uint64_t ImageId() const;
  // Identifies this index file and its verified body checksum (see ImageOpenOptions::trust_token).
  std::string TrustToken() const;
  // A key for everything this index says (image id, verified body checksum, chunk size, entry count): two
  // images with the same key serve the same bytes at the same entry ids. The node-wide cache is keyed by it, so
  // an index edited in place (which keeps its stored image id) never shares decoded chunks with the original.
  uint64_t ContentKey() const;

  // Partition files: part id -> path under partition_dir (or dir). True when it is present and
  // readable here (multi-node: only the staged ones are).
  std::string PartitionPath(uint32_t part) const;
  bool HasPartition(uint32_t part) const;
  // Why partition `part` cannot be read here (missing, not a file, a damaged or foreign header), in the words a
  // read of it gives; Ok when it can.
  Status PartitionStatus(uint32_t part) const;
  // As PartitionStatus, and kCorrupt too when the file is shorter than its header says (truncated, or still being
  // copied), which reads find only at the chunks cut off.
  Status PartitionWhole(uint32_t part) const;
  uint32_t PartitionCount() const;  // regular + replicated
  // The first 64 bytes of partition `part`'s file (e.g. received from another node) are its valid header for this
  // image: the same words as a read of a damaged or foreign partition otherwise.
  Status CheckPartitionHeader(uint32_t part, const char* header) const;

  uint32_t ChunkSize() const;
  uint64_t ChunkTableSize() const;            // records in the chunk table
  uint64_t ChunkCount(const Entry& e) const;  // chunks of a file: ceil(size / chunk size)
  // Chunk `i` of file `e`, every field checked against the entry and the format's limits: an index crafted
  // to point past its file, to sizes above the chunk size or to overlapping ranges is kCorrupt here, before
  // anything is allocated or read.
  Result<Chunk> GetChunk(const Entry& e, uint64_t i) const;
  // What every read of regular file `e` relies on, checked without reading a byte of it: a partition of this
  // image, offsets and sizes whose sums cannot wrap, no stored bytes for an empty file, a first chunk that lies
  // inside the file's stored range. kCorrupt naming the file otherwise. Client::Open (so that a layout `fanstore
  // verify` rejects is EIO at open), CheckFile and the daemon's prefetch hints share it.
  Status CheckLayout(const Entry& e) const;
  // Reads chunk `c` of `e` from its local partition, decodes it into `out` (c.raw_size bytes) and checks its
  // XXH3. kCorrupt (naming the file and partition) on a mismatch, a bad frame, or a partition that is shorter
  // than the index says (truncated since): `out` must then not be used. Reads with pread only, so a partition
  // changed or truncated under a running reader is an error, never a SIGBUS or a wrong byte. `scratch` (at least
  // c.stored_size bytes) receives the stored bytes of a compressed chunk; null: a temporary buffer.
  Status ReadChunk(const Entry& e, const Chunk& c, char* out, char* scratch = nullptr) const;

  // Reads the stored bytes of file `id` (all its chunks, as packed) from its local partition into `out`.
  Status ReadStored(uint32_t id, std::string* out) const;
  // Part of them: [offset, offset + length) of the file's stored range (e.g. one chunk, for a remote peer).
  Status ReadStoredRange(uint32_t id, uint64_t offset, uint64_t length, std::string* out) const;
  // Reads and decodes the whole file `id` into `out` (exactly Get(id).size bytes), chunk by chunk, and checks
  // every chunk checksum and the whole-file one: kCorrupt naming the file on a mismatch.
  Status ReadFile(uint32_t id, void* out) const;
  // Decodes file `id` from its local partition in constant memory and checks every checksum (verify).
  Status CheckFile(uint32_t id) const;

  struct Impl;

 private:
  explicit Image(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Decodes the stored bytes of chunk `c` of `e` (e.g. received from a remote daemon) into `out` (c.raw_size
// bytes) and checks its XXH3. Shared by every read path so they all fail the same way.
Status DecodeChunk(const Entry& e, const Chunk& c, const void* stored, size_t stored_size, char* out);

// Verifies every file's checksum. Calls `bad` once per corrupt/unreadable file with a one-line reason.
// Returns the number of bad files (0 = the image is sound).
uint64_t VerifyImage(const Image& img, int threads, const std::function<void(const Entry&, const Status&)>& bad);

// Writes the whole of the index file `index_file` (a regular file) into `fd` (a new file, a memfd) from the start:
// a private copy to open with ImageOpenOptions::index_file. The copy is only as good as its own open's checks.
Status CopyIndexFile(const std::string& index_file, int fd);

}  // namespace fanstore
