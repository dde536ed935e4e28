// A byte range of a partition: the unit the daemons fetch, cache and prefetch (they know nothing else of the
// image format: which ranges a file occupies comes from fanstore::Image).
#pragma once

#include <cstdint>

#include "fanstore/protocol/range_check.hpp"

namespace fanstore::daemon {

struct ByteRange {
  uint32_t part = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  // `inner` lies inside this range (overflow-proof: either may come from a client or a peer).
  bool Contains(const ByteRange& inner) const {
    return inner.part == part && RangeInside(inner.offset, inner.length, offset, length);
  }
  bool operator==(const ByteRange& o) const { return part == o.part && offset == o.offset && length == o.length; }
};

struct ByteRangeHash {
  size_t operator()(const ByteRange& r) const {
    uint64_t h = r.offset * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(r.part) << 32) ^ r.length;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

}  // namespace fanstore::daemon
