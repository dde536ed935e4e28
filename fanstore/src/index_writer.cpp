// Serialises the pack tree into index.fsi (layout in docs/format.md) and computes the image id.
#include <xxhash.h>

#include <sys/stat.h>

#include <bit>
#include <cstring>
#include <memory>

#include "fanstore/protocol/image_format.hpp"
#include "pack_tree.hpp"

namespace fanstore {
namespace {

using namespace format;

void EncodeEntry(const PackTree& tree, const PackNode& n, char* r) {
  Store64(r + ent::kPathOff, n.path_off);  // the paths arena is the start of the string table
  Store32(r + ent::kPathLen, n.path_len);
  Store32(r + ent::kNameOff, n.name_off);
  Store32(r + ent::kParent, n.parent);
  Store32(r + ent::kMode, n.mode);
  Store64(r + ent::kSize, n.size);
  Store32(r + ent::kUid, n.uid);
  Store32(r + ent::kGid, n.gid);
  Store64(r + ent::kBlocks, n.blocks);
  Store64(r + ent::kMtimeSec, static_cast<uint64_t>(n.mtime_sec));
  Store32(r + ent::kMtimeNsec, n.mtime_nsec);
  Store32(r + ent::kNlink, n.nlink);
  Store64(r + ent::kIno, 0);  // filled by the caller: it depends on the id only
  Store32(r + ent::kPart, n.part);
  Store32(r + ent::kCodec, static_cast<uint32_t>(n.codec));
  // A symlink's target sits in the string table after the paths.
  Store64(r + ent::kOffset, (n.mode & S_IFMT) == S_IFLNK ? tree.paths.size() + n.offset : n.offset);
  Store64(r + ent::kStoredSize, n.stored_size);
  Store64(r + ent::kChecksum, n.checksum);
  if ((n.mode & S_IFMT) == S_IFDIR) {
    Store32(r + ent::kChildFirst, n.child_first);
    Store32(r + ent::kChildCount, n.child_count);
  } else {
    Store64(r + ent::kChunkFirst, n.chunk_first);
  }
}

// Calls `sink` with `count` records of `size` bytes, encoded by `encode(i, record)` into a zeroed buffer of at most
// `piece` records at a time, so a million entries never need one big buffer.
template <class Encode, class Sink>
void EncodeInPieces(size_t count, size_t size, size_t piece, Encode&& encode, Sink&& sink) {
  std::unique_ptr<char[]> buf(new char[piece * size]);
  for (size_t i = 0; i < count; i += piece) {
    size_t n = std::min(piece, count - i);
    std::memset(buf.get(), 0, n * size);
    for (size_t k = 0; k < n; ++k) encode(i + k, buf.get() + k * size);
    sink(buf.get(), n * size);
  }
}

// The entry table: each record, with its stable inode id + 1 (never 0: same image, same numbers); the names of
// a hard-linked file share the inode of the first.
template <class Sink>
void ForEachEntryChunk(const PackTree& tree, Sink&& sink) {
  EncodeInPieces(
      tree.nodes.size(), kEntrySize, 4096,
      [&](size_t id, char* r) {
        const PackNode& n = tree.nodes[id];
        EncodeEntry(tree, n, r);
        Store64(r + ent::kIno, (n.is_alias() ? n.link_of : id) + 1);
      },
      sink);
}

// The chunk table.
template <class Sink>
void ForEachChunkTablePiece(const PackTree& tree, Sink&& sink) {
  EncodeInPieces(
      tree.chunks.size(), kChunkRecordSize, 65536,
      [&](size_t i, char* r) {
        const ChunkRecord& c = tree.chunks[i];
        Store64(r + chk::kStoredOff, c.stored_off);
        Store32(r + chk::kStoredSize, c.stored_size);
        Store32(r + chk::kCodec, static_cast<uint32_t>(c.codec));
        Store64(r + chk::kChecksum, c.checksum);
      },
      sink);
}

std::string PartitionTable(const IndexMeta& meta, uint64_t names_base) {
  std::string t(meta.parts.size() * kPartRecordSize, '\0');
  uint64_t off = names_base;
  for (size_t i = 0; i < meta.parts.size(); ++i) {
    char* r = t.data() + i * kPartRecordSize;
    Store64(r + prec::kNameOff, off);
    Store32(r + prec::kNameLen, static_cast<uint32_t>(meta.parts[i].file_name.size()));
    Store64(r + prec::kStoredBytes, meta.parts[i].stored_bytes);
    Store64(r + prec::kFileCount, meta.parts[i].files);
    off += meta.parts[i].file_name.size();
  }
  return t;
}

std::string PartitionNames(const IndexMeta& meta) {
  std::string s;
  for (const auto& p : meta.parts) s += p.file_name;
  return s;
}

// Open addressing, linear probing, power-of-two buckets at load <= 0.5.
std::string HashTable(const PackTree& tree) {
  uint64_t buckets = std::bit_ceil(std::max<uint64_t>(8, 2 * tree.nodes.size()));
  std::string t(buckets * kBucketSize, '\0');
  for (uint64_t b = 0; b < buckets; ++b) Store32(t.data() + b * kBucketSize, kEmptyBucket);
  for (size_t id = 0; id < tree.nodes.size(); ++id) {
    std::string_view p = tree.Path(tree.nodes[id]);
    uint64_t h = XXH3_64bits(p.data(), p.size());
    for (uint64_t b = h & (buckets - 1);; b = (b + 1) & (buckets - 1)) {
      char* slot = t.data() + b * kBucketSize;
      if (Load32(slot) != kEmptyBucket) continue;
      Store32(slot, static_cast<uint32_t>(id));
      Store32(slot + 4, static_cast<uint32_t>(h >> 32));
      break;
    }
  }
  return t;
}

}  // namespace

uint64_t ComputeImageId(const PackTree& tree, const IndexMeta& meta) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  ForEachEntryChunk(tree, [&](const char* p, size_t n) { XXH3_64bits_update(st, p, n); });
  ForEachChunkTablePiece(tree, [&](const char* p, size_t n) { XXH3_64bits_update(st, p, n); });
  XXH3_64bits_update(st, tree.paths.data(), tree.paths.size());
  XXH3_64bits_update(st, tree.targets.data(), tree.targets.size());
  std::string parts = PartitionTable(meta, tree.paths.size() + tree.targets.size()) + PartitionNames(meta);
  XXH3_64bits_update(st, parts.data(), parts.size());
  char counts[12];
  Store32(counts, meta.regular_parts);
  Store32(counts + 4, meta.replicated_part);
  Store32(counts + 8, meta.chunk_shift);
  XXH3_64bits_update(st, counts, sizeof counts);
  uint64_t id = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return id;
}

Status WriteIndex(const PackTree& tree, const IndexMeta& meta, uint64_t image_id, WritableFile* out) {
  std::string header(kHeaderSize, '\0');
  Status s = out->Append(header.data(), header.size());  // placeholder, patched once the body hash is known
  if (!s.ok()) return s;

  XXH3_state_t* body_hash = XXH3_createState();
  XXH3_64bits_reset(body_hash);
  uint64_t pos = kHeaderSize;
  auto append = [&](const void* p, size_t n) {
    if (!s.ok() || n == 0) return;
    s = out->Append(p, n);
    XXH3_64bits_update(body_hash, p, n);
    pos += n;
  };
  auto pad = [&] {
    static const char kZeros[8] = {};
    append(kZeros, Align8(pos) - pos);
  };

  uint64_t entries_off = pos;
  ForEachEntryChunk(tree, append);
  uint64_t entries_size = pos - entries_off;
  pad();

  uint64_t children_off = pos;
  {
    std::string c(tree.children.size() * 4, '\0');
    for (size_t i = 0; i < tree.children.size(); ++i) Store32(c.data() + 4 * i, tree.children[i]);
    append(c.data(), c.size());
  }
  uint64_t children_size = pos - children_off;
  pad();

  uint64_t hash_off = pos;
  {
    std::string h = HashTable(tree);
    append(h.data(), h.size());
  }
  uint64_t hash_size = pos - hash_off;

  uint64_t parts_off = pos;
  {
    std::string p = PartitionTable(meta, tree.paths.size() + tree.targets.size());
    append(p.data(), p.size());
  }
  uint64_t parts_size = pos - parts_off;
  pad();

  uint64_t chunks_off = pos;
  ForEachChunkTablePiece(tree, append);
  uint64_t chunks_size = pos - chunks_off;

  uint64_t strings_off = pos;
  append(tree.paths.data(), tree.paths.size());
  append(tree.targets.data(), tree.targets.size());
  {
    std::string names = PartitionNames(meta);
    append(names.data(), names.size());
  }
  uint64_t strings_size = pos - strings_off;
  pad();
  uint64_t body_xxh3 = XXH3_64bits_digest(body_hash);
  XXH3_freeState(body_hash);
  if (!s.ok()) return s;

  char* h = header.data();
  std::memcpy(h + hdr::kMagic, kIndexMagic, sizeof kIndexMagic);
  Store32(h + hdr::kVersion, kVersion);
  Store32(h + hdr::kHeaderSize, kHeaderSize);
  Store32(h + hdr::kFlags, tree.shared_libraries ? kFlagSharedLibraries : 0);
  Store32(h + hdr::kRegularParts, meta.regular_parts);
  Store32(h + hdr::kReplicatedPart, meta.replicated_part);
  Store32(h + hdr::kPartitionCount, static_cast<uint32_t>(meta.parts.size()));
  Store64(h + hdr::kEntryCount, tree.nodes.size());
  Store64(h + hdr::kFileCount, tree.files);
  Store64(h + hdr::kDirCount, tree.dirs);
  Store64(h + hdr::kLinkCount, tree.links);
  Store64(h + hdr::kBytesIn, meta.bytes_in);
  Store64(h + hdr::kBytesStored, meta.bytes_stored);
  Store64(h + hdr::kImageId, image_id);
  Store64(h + hdr::kIndexSize, pos);
  Store32(h + hdr::kChunkShift, meta.chunk_shift);
  Store64(h + hdr::kChunkCount, tree.chunks.size());
  Store64(h + hdr::kChunksOff, chunks_off);
  Store64(h + hdr::kChunksSize, chunks_size);
  Store64(h + hdr::kEntriesOff, entries_off);
  Store64(h + hdr::kEntriesSize, entries_size);
  Store64(h + hdr::kChildrenOff, children_off);
  Store64(h + hdr::kChildrenSize, children_size);
  Store64(h + hdr::kHashOff, hash_off);
  Store64(h + hdr::kHashSize, hash_size);
  Store64(h + hdr::kPartsOff, parts_off);
  Store64(h + hdr::kPartsSize, parts_size);
  Store64(h + hdr::kStringsOff, strings_off);
  Store64(h + hdr::kStringsSize, strings_size);
  Store64(h + hdr::kBodyXxh3, body_xxh3);
  Store64(h + hdr::kHeaderXxh3, XXH3_64bits(h, hdr::kHeaderXxh3));
  return out->WriteAt(0, header.data(), header.size());
}

}  // namespace fanstore
