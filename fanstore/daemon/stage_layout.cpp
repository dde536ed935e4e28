// Pieces of a partition file and their verification.
#include "stage_layout.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "fanstore/protocol/image_format.hpp"

namespace fanstore::daemon {

Result<std::vector<PartLayout>> CutPartitions(const Image& img, const std::vector<uint32_t>& parts,
                                              const std::vector<uint64_t>& sizes, uint64_t piece_bytes) {
  std::vector<PartLayout> out(parts.size());
  std::unordered_map<uint32_t, size_t> slot;
  for (size_t i = 0; i < parts.size(); ++i) {
    out[i].part = parts[i];
    out[i].size = sizes[i];
    slot[parts[i]] = i;
  }
  for (uint64_t id = 0; id < img.size(); ++id) {
    Entry e = img.Get(static_cast<uint32_t>(id));
    if (!e.is_reg() || e.stored_size == 0) continue;
    auto it = slot.find(e.part);
    if (it == slot.end()) continue;
    PartLayout& l = out[it->second];
    uint64_t n = img.ChunkCount(e);
    for (uint64_t c = 0; c < n; ++c) {
      auto ch = img.GetChunk(e, c);
      if (!ch.ok()) return ch.status();
      if (ch->stored_size == 0) continue;  // a chunk of zeros: nothing stored
      if (ch->offset < format::kPartHeaderSize || ch->offset + ch->stored_size > l.size)
        return Status(Code::kCorrupt, "index.fsi places " + Printable(e.path) + " outside " +
                                          img.PartitionPath(l.part) + ": re-pack or copy the image again");
      l.units.push_back({ch->offset, e.id, static_cast<uint32_t>(c)});
    }
  }
  for (PartLayout& l : out) {
    std::sort(l.units.begin(), l.units.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
    // Hard-linked names share their stored bytes: verify them once.
    l.units.erase(
        std::unique(l.units.begin(), l.units.end(), [](const auto& a, const auto& b) { return a.offset == b.offset; }),
        l.units.end());
    // A piece ends where the first unit starting at or past piece_bytes from its start begins.
    uint64_t start = 0;
    for (uint32_t u = 0; u < l.units.size(); ++u) {
      if (l.units[u].offset > start && l.units[u].offset - start >= piece_bytes) {
        l.piece_ends.push_back(l.units[u].offset);
        l.piece_units.push_back(u);
        start = l.units[u].offset;
      }
    }
    if (l.size > start || l.piece_ends.empty()) {
      l.piece_ends.push_back(l.size);
      l.piece_units.push_back(static_cast<uint32_t>(l.units.size()));
    }
  }
  return out;
}

Status VerifyPiece(const Image& img, const PartLayout& l, size_t k, const char* data, std::vector<char>* scratch) {
  const uint64_t begin = l.begin(k), end = l.piece_ends[k];
  if (k == 0) {
    if (end < format::kPartHeaderSize)
      return Status(Code::kCorrupt, img.PartitionPath(l.part) + " is shorter than a partition header");
    Status s = img.CheckPartitionHeader(l.part, data);
    if (!s.ok()) return s;
    if (format::Load64(data + format::phdr::kDataSize) + format::kPartHeaderSize != l.size)
      return Status(Code::kCorrupt, img.PartitionPath(l.part) + " is not as long as its header says");
  }
  for (uint32_t u = k ? l.piece_units[k - 1] : 0; u < l.piece_units[k]; ++u) {
    Entry e = img.Get(l.units[u].entry);
    auto c = img.GetChunk(e, l.units[u].chunk);
    if (!c.ok()) return c.status();
    if (c->offset < begin || c->offset + c->stored_size > end)
      return Status(Code::kCorrupt, "a chunk of " + Printable(e.path) + " straddles a staging piece");
    scratch->resize(std::max<size_t>(c->raw_size, 1));
    Status s = DecodeChunk(e, *c, data + (c->offset - begin), c->stored_size, scratch->data());
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace fanstore::daemon
