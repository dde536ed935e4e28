// How staging cuts a partition file into pieces: the unit one rank reads from the image directory and the other
// holders receive from it. Pieces end on chunk boundaries, so each one is verified on its own as it arrives (its
// chunks' checksums; piece 0 also carries the partition header), whichever way it came. Pure, no I/O, no MPI.
#pragma once

#include <cstdint>
#include <vector>

#include "fanstore/image.hpp"
#include "fanstore/status.hpp"

namespace fanstore::daemon {

struct PartLayout {
  uint32_t part = 0;
  uint64_t size = 0;                 // bytes of the partition file
  std::vector<uint64_t> piece_ends;  // piece k is [k ? piece_ends[k-1] : 0, piece_ends[k]); the last ends at size
  struct Unit {
    uint64_t offset;  // absolute, in the partition file
    uint32_t entry;
    uint32_t chunk;
  };
  std::vector<Unit> units;            // every stored chunk, by offset (hard links' shared bytes once)
  std::vector<uint32_t> piece_units;  // piece k's units are [k ? piece_units[k-1] : 0, piece_units[k])

  size_t pieces() const { return piece_ends.size(); }
  uint64_t begin(size_t k) const { return k ? piece_ends[k - 1] : 0; }
  uint64_t length(size_t k) const { return piece_ends[k] - begin(k); }
};

// Cuts each partition `parts[i]` (its file `sizes[i]` bytes long) of `img` into pieces of about `piece_bytes`
// (a chunk bigger than that is a piece of its own). One pass over the entry table for all of them. kCorrupt when
// the index places a chunk outside its partition file.
Result<std::vector<PartLayout>> CutPartitions(const Image& img, const std::vector<uint32_t>& parts,
                                              const std::vector<uint64_t>& sizes, uint64_t piece_bytes);

// Checks piece `k` of `l` (its bytes at `data`): the header for piece 0, then every chunk in it decoded against
// its checksum (`scratch` is reused between calls). kCorrupt naming the first bad file.
Status VerifyPiece(const Image& img, const PartLayout& l, size_t k, const char* data, std::vector<char>* scratch);

}  // namespace fanstore::daemon
