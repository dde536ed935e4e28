// Decoding stored file bytes (from memory or streamed from a partition fd) with checksum checks.
#pragma once

#include <cstddef>
#include <string>

#include "fanstore/image.hpp"

namespace fanstore {

// Decodes `stored` of `e` into `out` (e.size bytes) and checks the checksum. `where` names the partition
// in error messages ("part-00001.fsp").
Status DecodeBuffer(const Entry& e, const void* stored, size_t stored_size, void* out, const std::string& where);

// Reads the stored bytes of `e` from `fd` (pread, [e.offset, e.offset + e.stored_size)) in chunks and decodes
// them into `out` (e.size bytes), or, when `out` is null, only checks them in constant memory.
Status DecodeStream(const Entry& e, int fd, const std::string& where, char* out);

// pread until `n` bytes; a short file is kCorrupt (the partition is truncated).
Status PreadFull(int fd, void* buf, size_t n, uint64_t offset, const std::string& where);

Status ChecksumMismatch(const Entry& e, const std::string& where);

}  // namespace fanstore
