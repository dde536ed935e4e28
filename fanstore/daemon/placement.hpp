// Which ranks hold which partition, and in which order a reader tries them: pure functions, no MPI.
#pragma once

#include <cstdint>
#include <vector>

namespace fanstore::daemon {

// Ranks holding partition `part`: the replicated partition is on every rank; regular partition i is on
// rank i mod nranks and, with replicas K, also on the next K-1 ranks (distinct, so K is capped at nranks).
inline std::vector<int> Holders(uint32_t part, uint32_t replicated_part, int nranks, int replicas) {
  std::vector<int> h;
  if (nranks <= 0) return h;
  if (part == replicated_part) {
    for (int r = 0; r < nranks; ++r) h.push_back(r);
    return h;
  }
  int k = replicas < 1 ? 1 : (replicas > nranks ? nranks : replicas);
  int owner = static_cast<int>(part % static_cast<uint32_t>(nranks));
  for (int j = 0; j < k; ++j) h.push_back((owner + j) % nranks);
  return h;
}

inline bool Holds(int rank, uint32_t part, uint32_t replicated_part, int nranks, int replicas) {
  for (int r : Holders(part, replicated_part, nranks, replicas))
    if (r == rank) return true;
  return false;
}

// The one rank that reads piece `piece` of partition `part` from the image directory during staging; the other
// holders receive it from that rank. Pieces go round the holders, so a partition's K holders read a K-th of it
// each, and the replicated partition is read a rank's share by every rank; each round of nranks partitions starts
// one holder further on, so that partitions of one piece spread over every rank too (part i's first holder is
// rank i mod nranks: rotating by i itself would pick the same ranks for every partition).
inline int PieceReader(uint32_t part, uint64_t piece, uint32_t replicated_part, int nranks, int replicas) {
  std::vector<int> h = Holders(part, replicated_part, nranks, replicas);
  if (h.empty()) return 0;
  uint64_t round = nranks > 0 ? part / static_cast<uint32_t>(nranks) : 0;
  return h[static_cast<size_t>((piece + round) % h.size())];
}

// The order in which rank `self` asks for a range of `part`: the holders rotated by `key` (a hash of the range:
// deterministic, and spreads one partition's readers over its replicas), without `self`.
inline std::vector<int> ReadOrder(uint64_t key, uint32_t part, uint32_t replicated_part, int nranks, int replicas,
                                  int self) {
  std::vector<int> h = Holders(part, replicated_part, nranks, replicas);
  std::vector<int> order;
  if (h.empty()) return order;
  size_t start = static_cast<size_t>(key % h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    int r = h[(start + i) % h.size()];
    if (r != self) order.push_back(r);
  }
  return order;
}

// The rotation key of a range: ranges a few KiB apart land on different replicas.
inline uint64_t RangeKey(uint32_t part, uint64_t offset) { return (offset >> 12) + part; }

}  // namespace fanstore::daemon
