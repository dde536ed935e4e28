// Range arithmetic for offsets and lengths that arrive from outside the process (the client socket, an MPI peer,
// the index, a prefetch hint, a program's pread): `offset + length` may wrap past 2^64, so no check forms it
// before these have said it cannot. Every cache and reader tests its ranges with them.
#pragma once

#include <cstdint>

namespace fanstore {

// [offset, offset + length) lies inside [0, limit).
constexpr bool RangeWithin(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length <= limit - offset;
}

// [offset, offset + length) ends exactly at `limit`.
constexpr bool RangeEndsAt(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length == limit - offset;
}

// [offset, offset + length) lies inside [outer_offset, outer_offset + outer_length).
constexpr bool RangeInside(uint64_t offset, uint64_t length, uint64_t outer_offset, uint64_t outer_length) {
  return offset >= outer_offset && RangeWithin(offset - outer_offset, length, outer_length);
}

}  // namespace fanstore
