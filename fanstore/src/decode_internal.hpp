// Decoding one stored chunk (raw or zstd) with its checksum check, and the pread helper every read path uses.
#pragma once

#include <cstddef>
#include <string>

#include "fanstore/image.hpp"

namespace fanstore {

// Decodes `stored` (chunk `c` of `e`) into `out` (c.raw_size bytes) and checks the chunk's XXH3. `where`
// names the partition in error messages ("part-00001.fsp"). `out` may alias `stored` for a raw chunk.
Status DecodeChunkAt(const Entry& e, const Chunk& c, const void* stored, size_t stored_size, char* out,
                     const std::string& where);

// pread until `n` bytes; a short file is kCorrupt (the partition is truncated).
Status PreadFull(int fd, void* buf, size_t n, uint64_t offset, const std::string& where);
// "chunk I of PATH" (PATH alone for a one-chunk file), as messages name a chunk.
std::string ChunkName(const Entry& e, const Chunk& c);
// PreadFull of `n` stored bytes of chunk `c` of `e` from partition file `part`; an error names the chunk and file.
Status ReadStoredChunk(int fd, void* buf, const Entry& e, const Chunk& c, size_t n, const std::string& part);

// "<where>: <what> for <path> (the image is damaged: copy it again or re-pack)", as kCorrupt.
Status CorruptFile(const Entry& e, const std::string& where, const std::string& what);

// The largest stored size a zstd chunk of `raw` bytes may have (ZSTD_compressBound).
size_t MaxStoredSize(size_t raw);

}  // namespace fanstore
