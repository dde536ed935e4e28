// Per-chunk compression for pack: deterministic (single-threaded zstd per chunk, fixed level).
#include "pack_compress.hpp"

#include "hash.hpp"

namespace fanstore {

void CompressChunk(int level, ZSTD_CCtx* cctx, StoredChunk* c) {
  c->checksum = Xxh3(c->raw.get(), c->raw_size);
  c->codec = Codec::kRaw;
  c->stored_size = c->raw_size;
  if (level <= 0 || c->raw_size == 0) return;
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
