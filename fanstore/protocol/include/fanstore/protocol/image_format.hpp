// The on-disk image format (docs/format.md) as constants and little-endian accessors, shared by pack and Image.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "fanstore/protocol/little_endian.hpp"

namespace fanstore::format {

// ---- little-endian scalar access: the format is little-endian on every host ----
using le::Load32;
using le::Load64;
using le::Store32;
using le::Store64;

// Version 3: symlinks, hard links and owners are kept (104-byte entries). Version 2 (96-byte entries, no links,
// no owners) is still served. Version 1 (one zstd frame per file) is read only by `fanstore convert`.
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kOldestServedVersion = 2;
// Partition files did not change with version 3: their header keeps saying 2.
inline constexpr uint32_t kPartVersion = 2;
inline constexpr const char* kIndexName = "index.fsi";

// Chunk size limits: a power of two, 64 KiB .. 64 MiB. Chunks start page-aligned in the node chunk cache, and
// the upper bound caps what one chunk read may allocate, whatever an index says.
inline constexpr uint32_t kMinChunkShift = 16;
inline constexpr uint32_t kMaxChunkShift = 26;
inline constexpr uint32_t kDefaultChunkShift = 20;  // 1 MiB

// An entry's offset, stored size and size, and a partition's data size, are below this in any index a reader
// accepts: sums of two of them cannot wrap.
inline constexpr uint64_t kMaxStoredOffset = uint64_t{1} << 62;

// ---- index header (index.fsi, offset 0) ----
inline constexpr char kIndexMagic[8] = {'F', 'A', 'N', 'S', 'T', 'I', 'D', 'X'};
inline constexpr uint32_t kHeaderSize = 256;
namespace hdr {
inline constexpr size_t kMagic = 0, kVersion = 8, kHeaderSize = 12, kFlags = 16, kRegularParts = 20,
                        kReplicatedPart = 24, kPartitionCount = 28, kEntryCount = 32, kFileCount = 40, kDirCount = 48,
                        kBytesIn = 56, kBytesStored = 64, kImageId = 72, kIndexSize = 80, kChunkShift = 88,
                        kReserved0 = 92, kChunkCount = 96, kEntriesOff = 104, kEntriesSize = 112, kChildrenOff = 120,
                        kChildrenSize = 128, kHashOff = 136, kHashSize = 144, kPartsOff = 152, kPartsSize = 160,
                        kChunksOff = 168, kChunksSize = 176, kStringsOff = 184, kStringsSize = 192, kBodyXxh3 = 200,
                        kLinkCount = 208,  // version 3: symlink entries (reserved, 0, in version 2)
    kReserved1 = 216, kHeaderXxh3 = 248;
}  // namespace hdr

// Header flags (version 3). kFlagSharedLibraries: some file's name ends in ".so" or holds ".so." (a shared library),
// so `fanstore run` loads the loader's audit module, which costs every exec about half a millisecond.
inline constexpr uint32_t kFlagSharedLibraries = 1;

// ---- entry record (entry table), 112 bytes each (version 2: 96, without owner and blocks), id order ----
inline constexpr uint32_t kEntrySize = 112;
inline constexpr uint32_t kEntrySizeV2 = 96;
inline constexpr uint32_t EntrySize(uint32_t version) { return version == 2 ? kEntrySizeV2 : kEntrySize; }
namespace ent {
inline constexpr size_t kPathOff = 0, kPathLen = 8, kNameOff = 12, kParent = 16, kMode = 20, kSize = 24, kMtimeSec = 32,
                        kMtimeNsec = 40, kNlink = 44, kIno = 48, kPart = 56, kCodec = 60, kOffset = 64,
                        kStoredSize = 72, kChecksum = 80, kChildFirst = 88, kChildCount = 92,  // directories
    kChunkFirst = 88,                      // files of more than one chunk (u64)
    kUid = 96, kGid = 100, kBlocks = 104;  // version 3
}  // namespace ent
// A symlink's target is `size` bytes of the string table at `offset`; it has no partition and no chunks.
inline constexpr uint32_t kMaxLinkTarget = 4095;  // PATH_MAX - 1, as symlink(2) allows

// Entry codec values. A file of one chunk names that chunk's codec; a longer file is kCodecChunked and its
// chunks are described by the chunk table.
// kCodecZero (version 3): a chunk of zero bytes, stored as nothing (the holes of sparse files).
inline constexpr uint32_t kCodecRaw = 0, kCodecZstd = 1, kCodecChunked = 2, kCodecZero = 3;

// ---- chunk record (chunk table), 24 bytes each ----
inline constexpr uint32_t kChunkRecordSize = 24;
namespace chk {
inline constexpr size_t kStoredOff = 0,  // u64: offset of the chunk's stored bytes from the file's `offset`
    kStoredSize = 8,                     // u32
    kCodec = 12,                         // u32: kCodecRaw or kCodecZstd
    kChecksum = 16;                      // u64: XXH3-64 of the chunk's decoded bytes
}  // namespace chk

// ---- hash bucket, 8 bytes: entry id (kEmptyBucket = free) and the high 32 bits of the path hash ----
inline constexpr uint32_t kBucketSize = 8;
inline constexpr uint32_t kEmptyBucket = 0xFFFFFFFFu;

// ---- partition record (partition table), 32 bytes each, partition id order ----
inline constexpr uint32_t kPartRecordSize = 32;
namespace prec {
inline constexpr size_t kNameOff = 0, kNameLen = 8, kReserved = 12, kStoredBytes = 16, kFileCount = 24;
}  // namespace prec

// ---- partition file header (part-*.fsp, offset 0), 64 bytes; stored file bytes follow ----
inline constexpr char kPartMagic[8] = {'F', 'A', 'N', 'S', 'T', 'P', 'R', 'T'};
inline constexpr uint32_t kPartHeaderSize = 64;
namespace phdr {
inline constexpr size_t kMagic = 0, kVersion = 8, kHeaderSize = 12, kPartId = 16, kReserved = 20, kImageId = 24,
                        kDataSize = 32, kHeaderXxh3 = 56;
}  // namespace phdr

// Sections start 8-byte aligned so the mmap'd tables are naturally aligned.
inline uint64_t Align8(uint64_t v) { return (v + 7) & ~uint64_t{7}; }

// Number of chunks of a file of `size` bytes: 0 for an empty file, else ceil(size / chunk size).
inline uint64_t ChunkCount(uint64_t size, uint32_t chunk_shift) {
  return size == 0 ? 0 : ((size - 1) >> chunk_shift) + 1;
}

// File name of partition `id`: regular ones are numbered, the replicated one has a fixed name.
inline std::string PartitionFileName(uint32_t id, uint32_t regular_parts) {
  if (id == regular_parts) return "part-rep.fsp";
  char buf[32];
  std::snprintf(buf, sizeof buf, "part-%05u.fsp", id);
  return buf;
}

}  // namespace fanstore::format
