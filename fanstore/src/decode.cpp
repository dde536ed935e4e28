// Every read path decodes through here, so a damaged file fails the same way everywhere (kCorrupt, named).
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "decode_internal.hpp"

namespace fanstore {
namespace {

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// One decompression context per thread: creating one per read would cost more than small files do.
ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx(ZSTD_createDCtx());
  ZSTD_DCtx_reset(ctx.get(), ZSTD_reset_session_only);
  return ctx.get();
}

Status Corrupt(const Entry& e, const std::string& where, const std::string& what) {
  return Status(Code::kCorrupt, where + ": " + what + " for " + std::string(e.path) +
                                    " (the image is damaged: copy it again or re-pack)");
}

std::string DefaultWhere(const Entry& e) { return "partition " + std::to_string(e.part); }

}  // namespace

Status ChecksumMismatch(const Entry& e, const std::string& where) { return Corrupt(e, where, "checksum mismatch"); }

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

Status DecodeBuffer(const Entry& e, const void* stored, size_t stored_size, void* out, const std::string& where) {
  if (e.codec == Codec::kRaw) {
    if (stored_size != e.size) return Corrupt(e, where, "stored size mismatch");
    if (e.size > 0) std::memmove(out, stored, e.size);
  } else if (e.codec == Codec::kZstd) {
    size_t r = ZSTD_decompressDCtx(ThreadDCtx(), out, e.size, stored, stored_size);
    if (ZSTD_isError(r)) return Corrupt(e, where, std::string("zstd: ") + ZSTD_getErrorName(r));
    if (r != e.size) return Corrupt(e, where, "decoded size mismatch");
  } else {
    return Corrupt(e, where, "unknown codec " + std::to_string(static_cast<uint32_t>(e.codec)));
  }
  if (XXH3_64bits(out, e.size) != e.checksum) return ChecksumMismatch(e, where);
  return Status::Ok();
}

Status DecodeStream(const Entry& e, int fd, const std::string& where, char* out) {
  constexpr size_t kInChunk = 1 << 20;
  constexpr size_t kScratch = 1 << 20;
  std::unique_ptr<char[]> in(new char[kInChunk]);
  std::unique_ptr<char[]> scratch(out == nullptr ? new char[kScratch] : nullptr);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hs(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(hs.get());
  uint64_t produced = 0;

  if (e.codec == Codec::kRaw) {
    if (e.stored_size != e.size) return Corrupt(e, where, "stored size mismatch");
    while (produced < e.size) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kInChunk, e.size - produced));
      char* dst = out ? out + produced : in.get();
      Status s = PreadFull(fd, dst, n, e.offset + produced, where);
      if (!s.ok()) return s;
      XXH3_64bits_update(hs.get(), dst, n);
      produced += n;
    }
  } else if (e.codec == Codec::kZstd) {
    ZSTD_DCtx* d = ThreadDCtx();
    uint64_t consumed = 0;
    size_t last_ret = 1;
    char overflow;  // output past e.size lands here and marks the file corrupt
    while (consumed < e.stored_size) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kInChunk, e.stored_size - consumed));
      Status s = PreadFull(fd, in.get(), n, e.offset + consumed, where);
      if (!s.ok()) return s;
      consumed += n;
      ZSTD_inBuffer ib{in.get(), n, 0};
      while (ib.pos < ib.size) {
        if (last_ret == 0) return Corrupt(e, where, "trailing bytes after the compressed frame");
        ZSTD_outBuffer ob;
        if (produced == e.size) {
          ob = {&overflow, 1, 0};
        } else if (out) {
          ob = {out + produced, static_cast<size_t>(e.size - produced), 0};
        } else {
          ob = {scratch.get(), static_cast<size_t>(std::min<uint64_t>(kScratch, e.size - produced)), 0};
        }
        last_ret = ZSTD_decompressStream(d, &ob, &ib);
        if (ZSTD_isError(last_ret)) return Corrupt(e, where, std::string("zstd: ") + ZSTD_getErrorName(last_ret));
        if (ob.dst == &overflow) {
          if (ob.pos > 0) return Corrupt(e, where, "decodes to more bytes than its size");
          if (last_ret != 0 && ib.pos == ib.size) break;  // needs more input, which must produce nothing
          continue;
        }
        XXH3_64bits_update(hs.get(), ob.dst, ob.pos);
        produced += ob.pos;
      }
    }
    // Flush whatever zstd still holds (it may have all input but not yet all output).
    while (last_ret != 0) {
      ZSTD_inBuffer ib{nullptr, 0, 0};
      ZSTD_outBuffer ob;
      if (produced == e.size) ob = {&overflow, 1, 0};
      else if (out) ob = {out + produced, static_cast<size_t>(e.size - produced), 0};
      else ob = {scratch.get(), static_cast<size_t>(std::min<uint64_t>(kScratch, e.size - produced)), 0};
      last_ret = ZSTD_decompressStream(d, &ob, &ib);
      if (ZSTD_isError(last_ret)) return Corrupt(e, where, std::string("zstd: ") + ZSTD_getErrorName(last_ret));
      if (ob.dst == &overflow) {
        if (ob.pos > 0) return Corrupt(e, where, "decodes to more bytes than its size");
        if (last_ret != 0) return Corrupt(e, where, "compressed frame is incomplete");
        break;
      }
      if (ob.pos == 0 && last_ret != 0) return Corrupt(e, where, "compressed frame is incomplete");
      XXH3_64bits_update(hs.get(), ob.dst, ob.pos);
      produced += ob.pos;
    }
    if (produced != e.size) return Corrupt(e, where, "decoded size mismatch");
  } else {
    return Corrupt(e, where, "unknown codec " + std::to_string(static_cast<uint32_t>(e.codec)));
  }
  if (XXH3_64bits_digest(hs.get()) != e.checksum) return ChecksumMismatch(e, where);
  return Status::Ok();
}

}  // namespace fanstore

namespace fanstore {

Status DecodeStored(const Entry& e, const void* stored, size_t stored_size, void* out) {
  return DecodeBuffer(e, stored, stored_size, out, DefaultWhere(e));
}

}  // namespace fanstore
