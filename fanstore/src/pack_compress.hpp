// Turning one chunk of source bytes into its stored form: XXH3 of the content, zstd where it pays.
#pragma once

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fanstore/image.hpp"

namespace fanstore {

// Compressed output is kept only when it is below this fraction of the original (in percent);
// JPEG and other already-compressed data end up raw, which also makes reading it cheaper.
inline constexpr uint64_t kKeepCompressedPercent = 97;

// A chunk as pack holds it between the worker that reads and compresses it and the writer.
struct StoredChunk {
  std::unique_ptr<char[]> raw;                 // the source bytes (raw_size)
  std::unique_ptr<char[]> zbuf;                // compressed bytes when codec == kZstd
  size_t raw_capacity = 0, zbuf_capacity = 0;  // buffers are recycled between chunks
  size_t raw_size = 0;
  size_t stored_size = 0;
  Codec codec = Codec::kRaw;
  uint64_t checksum = 0;  // XXH3-64 of raw
  const char* stored() const { return codec == Codec::kZstd ? zbuf.get() : raw.get(); }
};

// Fills codec/stored_size/checksum of `c` from c.raw: compressed with `cctx` at `level` when that makes the
// chunk smaller than kKeepCompressedPercent of it (level 0: raw); a chunk of zeros is kZero, stored as nothing. Reuses
// c.zbuf when it is large enough.
void CompressChunk(int level, ZSTD_CCtx* cctx, StoredChunk* c);

}  // namespace fanstore
