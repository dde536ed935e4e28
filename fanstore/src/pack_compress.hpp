// Reading one source file and turning it into stored bytes (zstd or raw), in memory or streamed.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <string>

#include "fanstore/image.hpp"
#include "fanstore/status.hpp"
#include "write_env.hpp"

namespace fanstore {

// Files above this are streamed by the partition writer instead of being loaded whole by a worker.
inline constexpr uint64_t kStreamThreshold = 64ull << 20;

// Compressed output is kept only when it is below this fraction of the original (in percent);
// JPEG and other already-compressed data end up raw, which also makes reading it cheaper.
inline constexpr uint64_t kKeepCompressedPercent = 97;

struct StoredFile {
  std::string bytes;  // what goes into the partition
  Codec codec = Codec::kRaw;
  uint64_t size = 0;  // bytes read from the source (the file may have changed since it was stat'ed)
  uint64_t checksum = 0;
};

// Reads `path` whole and compresses it with `cctx` at `level` (level 0: store raw).
Status LoadStoredFile(const std::string& path, uint64_t size_hint, int level, ZSTD_CCtx* cctx, StoredFile* out);

// Streams `path` into `dst` as one zstd frame (or raw), using `threads` zstd workers; falls back to raw
// (rewriting it) when compression does not pay. Sets codec/size/checksum/stored_size.
Status StreamStoredFile(const std::string& path, int level, int threads, WritableFile* dst, Codec* codec,
                        uint64_t* size, uint64_t* checksum, uint64_t* stored_size);

}  // namespace fanstore
