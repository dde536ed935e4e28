// The on-disk image format (docs/format.md) as constants and little-endian accessors, shared by pack and Image.
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace fanstore::format {

// ---- little-endian scalar access: the format is little-endian on every host ----
inline uint32_t Load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}
inline uint64_t Load64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}
inline void Store32(void* p, uint32_t v) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof v);
}
inline void Store64(void* p, uint64_t v) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  std::memcpy(p, &v, sizeof v);
}

inline constexpr uint32_t kVersion = 1;
inline constexpr const char* kIndexName = "index.fsi";

// ---- index header (index.fsi, offset 0) ----
inline constexpr char kIndexMagic[8] = {'F', 'A', 'N', 'S', 'T', 'I', 'D', 'X'};
inline constexpr uint32_t kHeaderSize = 192;
namespace hdr {
inline constexpr size_t kMagic = 0, kVersion = 8, kHeaderSize = 12, kFlags = 16, kRegularParts = 20,
                        kReplicatedPart = 24, kPartitionCount = 28, kEntryCount = 32, kFileCount = 40,
                        kDirCount = 48, kBytesIn = 56, kBytesStored = 64, kImageId = 72, kIndexSize = 80,
                        kEntriesOff = 88, kEntriesSize = 96, kChildrenOff = 104, kChildrenSize = 112,
                        kHashOff = 120, kHashSize = 128, kPartsOff = 136, kPartsSize = 144,
                        kStringsOff = 152, kStringsSize = 160, kBodyXxh3 = 168, kReserved = 176,
                        kHeaderXxh3 = 184;
}  // namespace hdr

// ---- entry record (entry table), 96 bytes each, id order ----
inline constexpr uint32_t kEntrySize = 96;
namespace ent {
inline constexpr size_t kPathOff = 0, kPathLen = 8, kNameOff = 12, kParent = 16, kMode = 20, kSize = 24,
                        kMtimeSec = 32, kMtimeNsec = 40, kNlink = 44, kIno = 48, kPart = 56, kCodec = 60,
                        kOffset = 64, kStoredSize = 72, kChecksum = 80, kChildFirst = 88, kChildCount = 92;
}  // namespace ent

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

// File name of partition `id`: regular ones are numbered, the replicated one has a fixed name.
inline std::string PartitionFileName(uint32_t id, uint32_t regular_parts) {
  if (id == regular_parts) return "part-rep.fsp";
  char buf[32];
  std::snprintf(buf, sizeof buf, "part-%05u.fsp", id);
  return buf;
}

}  // namespace fanstore::format
