// Reads source files and produces their stored form: XXH3 of the content, zstd where it pays.
#include "pack_compress.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace fanstore {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// read() until `n` bytes or EOF; returns bytes read or -1 with errno.
ssize_t ReadFull(int fd, char* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

bool Pays(uint64_t stored, uint64_t size) { return stored * 100 < size * kKeepCompressedPercent; }

struct CStreamDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};

}  // namespace

Status LoadStoredFile(const std::string& path, uint64_t size_hint, int level, ZSTD_CCtx* cctx, StoredFile* out) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, "cannot open " + path);
  std::string buf(size_hint, '\0');
  ssize_t r = ReadFull(fd.get(), buf.data(), buf.size());
  if (r < 0) return Status::FromErrno(errno, "cannot read " + path);
  size_t n = static_cast<size_t>(r);
  if (n == buf.size()) {  // it may have grown since it was stat'ed: take what is there now
    for (;;) {
      buf.resize(n + 65536);
      r = ReadFull(fd.get(), buf.data() + n, 65536);
      if (r < 0) return Status::FromErrno(errno, "cannot read " + path);
      n += static_cast<size_t>(r);
      if (r < 65536) break;
    }
  }
  buf.resize(n);
  out->size = n;
  out->checksum = XXH3_64bits(buf.data(), n);
  out->codec = Codec::kRaw;
  if (level > 0 && n > 0) {
    std::string z(ZSTD_compressBound(n), '\0');
    size_t zn = ZSTD_compressCCtx(cctx, z.data(), z.size(), buf.data(), n, level);
    if (!ZSTD_isError(zn) && Pays(zn, n)) {
      z.resize(zn);
      out->bytes = std::move(z);
      out->codec = Codec::kZstd;
      return Status::Ok();
    }
  }
  out->bytes = std::move(buf);
  return Status::Ok();
}

Status StreamStoredFile(const std::string& path, int level, int threads, WritableFile* dst, Codec* codec,
                        uint64_t* size, uint64_t* checksum, uint64_t* stored_size) {
  constexpr size_t kChunk = 4 << 20;
  std::unique_ptr<char[]> in(new char[kChunk]);
  const uint64_t start = dst->Size();
  XXH3_state_t* hs = XXH3_createState();
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hs_guard(hs, &XXH3_freeState);

  if (level > 0) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return Status::FromErrno(errno, "cannot open " + path);
    std::unique_ptr<ZSTD_CCtx, CStreamDeleter> cctx(ZSTD_createCCtx());
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, level);
    // With >= 1 worker zstd's output does not depend on the worker count, so the image stays deterministic.
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_nbWorkers, std::max(1, threads));
    const size_t out_cap = ZSTD_CStreamOutSize();
    std::unique_ptr<char[]> zbuf(new char[out_cap]);
    XXH3_64bits_reset(hs);
    uint64_t total = 0;
    for (bool last = false; !last;) {
      ssize_t r = ReadFull(fd.get(), in.get(), kChunk);
      if (r < 0) return Status::FromErrno(errno, "cannot read " + path);
      last = static_cast<size_t>(r) < kChunk;
      XXH3_64bits_update(hs, in.get(), static_cast<size_t>(r));
      total += static_cast<uint64_t>(r);
      ZSTD_inBuffer ib{in.get(), static_cast<size_t>(r), 0};
      ZSTD_EndDirective mode = last ? ZSTD_e_end : ZSTD_e_continue;
      for (;;) {
        ZSTD_outBuffer ob{zbuf.get(), out_cap, 0};
        size_t rem = ZSTD_compressStream2(cctx.get(), &ob, &ib, mode);
        if (ZSTD_isError(rem)) return Status(Code::kIoError, std::string("zstd: ") + ZSTD_getErrorName(rem));
        Status s = dst->Append(zbuf.get(), ob.pos);
        if (!s.ok()) return s;
        if (last ? rem == 0 : ib.pos == ib.size) break;
      }
    }
    uint64_t stored = dst->Size() - start;
    if (Pays(stored, total)) {
      *codec = Codec::kZstd;
      *size = total;
      *checksum = XXH3_64bits_digest(hs);
      *stored_size = stored;
      return Status::Ok();
    }
    Status s = dst->Truncate(start);  // did not pay: store it raw instead
    if (!s.ok()) return s;
  }

  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, "cannot open " + path);
  XXH3_64bits_reset(hs);
  uint64_t total = 0;
  for (;;) {
    ssize_t r = ReadFull(fd.get(), in.get(), kChunk);
    if (r < 0) return Status::FromErrno(errno, "cannot read " + path);
    XXH3_64bits_update(hs, in.get(), static_cast<size_t>(r));
    Status s = dst->Append(in.get(), static_cast<size_t>(r));
    if (!s.ok()) return s;
    total += static_cast<uint64_t>(r);
    if (static_cast<size_t>(r) < kChunk) break;
  }
  *codec = Codec::kRaw;
  *size = total;
  *checksum = XXH3_64bits_digest(hs);
  *stored_size = total;
  return Status::Ok();
}

}  // namespace fanstore
