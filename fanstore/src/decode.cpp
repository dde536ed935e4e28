// Every read path decodes through here, so a damaged chunk fails the same way everywhere (kCorrupt, named).
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "decode_internal.hpp"
#include "hash.hpp"

namespace fanstore {
namespace {

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// One decompression context per thread: creating one per chunk would cost more than small files do.
ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx(ZSTD_createDCtx());
  ZSTD_DCtx_reset(ctx.get(), ZSTD_reset_session_only);
  return ctx.get();
}

}  // namespace

std::string ChunkName(const Entry& e, const Chunk& c) {
  if (e.codec != Codec::kChunked) return Printable(e.path);
  return "chunk " + std::to_string(c.index) + " of " + Printable(e.path);
}

Status ReadStoredChunk(int fd, void* buf, const Entry& e, const Chunk& c, size_t n, const std::string& part) {
  Status s = PreadFull(fd, buf, n, c.offset, part);
  if (s.ok()) return s;
  if (s.code() == Code::kCorrupt)  // cut short: the partition ends before the chunk does
    return Status(Code::kCorrupt,
                  part + " is truncated: " + ChunkName(e, c) + " is cut off (copy the image again or re-pack)");
  return Status(s.code(), s.message() + " (" + ChunkName(e, c) + ")");
}

Status CorruptFile(const Entry& e, const std::string& where, const std::string& what) {
  return Status(Code::kCorrupt, where + ": " + what + " for " + Printable(e.path) +
                                    " (the image is damaged: copy it again or re-pack)");
}

size_t MaxStoredSize(size_t raw) { return ZSTD_compressBound(raw); }

Status PreadFull(int fd, void* buf, size_t n, uint64_t offset, const std::string& where) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read " + where);
    }
    if (r == 0) return Status(Code::kCorrupt, where + " is truncated (copy the image again or re-pack)");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Status DecodeChunkAt(const Entry& e, const Chunk& c, const void* stored, size_t stored_size, char* out,
                     const std::string& where) {
  auto corrupt = [&](const std::string& what) {
    return Status(Code::kCorrupt,
                  where + ": " + what + " in " + ChunkName(e, c) + " (the image is damaged: copy it again or re-pack)");
  };
  if (stored_size != c.stored_size) return corrupt("stored size mismatch");
  if (c.codec == Codec::kRaw) {
    if (stored_size != c.raw_size) return corrupt("stored size mismatch");
    if (out != stored && c.raw_size > 0) std::memcpy(out, stored, c.raw_size);
  } else if (c.codec == Codec::kZero) {
    std::memset(out, 0, c.raw_size);
  } else if (c.codec == Codec::kZstd) {
    // The frame header may claim any size: the output buffer is exactly raw_size, so zstd stops there.
    size_t r = ZSTD_decompressDCtx(ThreadDCtx(), out, c.raw_size, stored, stored_size);
    if (ZSTD_isError(r)) return corrupt(std::string("zstd: ") + ZSTD_getErrorName(r));
    if (r != c.raw_size) return corrupt("decoded size mismatch");
  } else {
    return corrupt("unknown codec " + std::to_string(static_cast<uint32_t>(c.codec)));
  }
  if (Xxh3(out, c.raw_size) != c.checksum) return corrupt("checksum mismatch");
  return Status::Ok();
}

Status DecodeChunk(const Entry& e, const Chunk& c, const void* stored, size_t stored_size, char* out) {
  return DecodeChunkAt(e, c, stored, stored_size, out, "partition " + std::to_string(e.part));
}

}  // namespace fanstore
