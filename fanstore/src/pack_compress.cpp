// Per-chunk compression for pack: deterministic (single-threaded zstd per chunk, fixed level).
#include "pack_compress.hpp"

#include <cstring>

#include "hash.hpp"

namespace fanstore {

void CompressChunk(int level, ZSTD_CCtx* cctx, StoredChunk* c) {
  c->checksum = Xxh3(c->raw.get(), c->raw_size);
  c->codec = Codec::kRaw;
  c->stored_size = c->raw_size;
  if (c->raw_size == 0) return;
  // All zeros (a hole of a sparse file, or zero-filled data): stored as nothing, at every level.
  if (c->raw[0] == 0 && std::memcmp(c->raw.get(), c->raw.get() + 1, c->raw_size - 1) == 0) {
    c->codec = Codec::kZero;
    c->stored_size = 0;
    return;
  }
  if (level <= 0) return;
  const size_t bound = ZSTD_compressBound(c->raw_size);
  if (!c->zbuf || c->zbuf_capacity < bound) {
    c->zbuf.reset(new char[bound]);
    c->zbuf_capacity = bound;
  }
  size_t zn = ZSTD_compressCCtx(cctx, c->zbuf.get(), bound, c->raw.get(), c->raw_size, level);
  if (!ZSTD_isError(zn) && zn * 100 < c->raw_size * kKeepCompressedPercent) {
    c->codec = Codec::kZstd;
    c->stored_size = zn;
  }
}

}  // namespace fanstore
