// ClientFile: the OpenFile of a Client -- range reads over verified chunks, read-ahead, kernel fds.
#include "client_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "owned_bytes.hpp"

namespace fanstore::detail {

namespace {
// Chunks decoded ahead of a sequential reader. Enough to keep every decode thread busy while the reader
// copies; bounded by a quarter of the chunk cache so read-ahead never evicts what it just decoded.
uint64_t AheadWindow(const ClientCore& core, uint32_t chunk_size) {
  const uint64_t by_budget = core.cache.budget() / 4 / chunk_size;
  return std::min<uint64_t>(by_budget, static_cast<uint64_t>(core.pool.threads()) * 2);
}
}  // namespace

ClientFile::ClientFile(ClientCore& core, const Entry& e)
    : core_(core),
      e_(e),
      chunks_(core.img.ChunkCount(e)),
      shift_(static_cast<uint32_t>(std::countr_zero(core.img.ChunkSize()))) {}

bool ClientFile::NoteRead(uint64_t off, uint64_t end) {
  uint64_t ahead_from = 0, ahead_to = 0;
  bool streaming;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const bool sequential = off == seq_end_ && off != 0;
    streak_ = sequential ? streak_ + 1 : 0;
    seq_end_ = end;
    // The second sequential read in a row starts the read-ahead: `head -c 16` decodes one chunk, a stream
    // keeps the decode threads ahead of it.
    streaming = streak_ >= 1;
    if (!streaming) return false;
    const uint64_t window = AheadWindow(core_, 1u << shift_);
    if (window == 0) return true;
    const uint64_t next = ((end - 1) >> shift_) + 1;
    ahead_from = std::max(next, ahead_);
    ahead_to = next + window - 1;
    if (ahead_from > ahead_to || ahead_from >= chunks_) return true;
    ahead_ = ahead_to + 1;
  }
  Prefetch(ahead_from, ahead_to);
  return streaming;
}

ClientCore::Offer ClientFile::StreamOffer() {
  int v = stream_offer_.load(std::memory_order_acquire);
  if (v < 0) {
    v = core_.node && core_.node->NoteStream(e_) ? 1 : 0;
    stream_offer_.store(v, std::memory_order_release);
  }
  return v ? ClientCore::Offer::kShare : ClientCore::Offer::kNone;
}

void ClientFile::Prefetch(uint64_t first, uint64_t last) {
  std::weak_ptr<ClientFile> self = weak_from_this();
  core_.Prefetch(e_, first, last, StreamOffer(), [self](uint64_t i) {
    // Closed meanwhile: nobody wants it. Reached by the reader: it loads that chunk itself (or joins a load
    // in flight), so loading it here too would fetch it twice. Asked under the cache lock, which the reader
    // takes after storing reading_, so the answer is never stale.
    auto f = self.lock();
    return f && i > f->reading_.load(std::memory_order_relaxed);
  });
}

bool ClientFile::StartRead(uint64_t off, size_t n, Range* r, bool queue_span) {
  if (off >= e_.size || n == 0) return false;
  r->off = off;
  r->end = off + std::min<uint64_t>(n, e_.size - off);
  r->first = off >> shift_;
  r->last = (r->end - 1) >> shift_;
  r->streaming = NoteRead(off, r->end);
  // A read spanning several chunks decodes them in parallel; the reading thread takes them in order.
  reading_.store(r->first, std::memory_order_relaxed);
  if (queue_span && r->last > r->first) Prefetch(r->first + 1, r->last);
  return true;
}

std::vector<uint64_t> ClientFile::DirectChunks(const Range& r) const {
  std::vector<uint64_t> direct;
  // Remote files only: for a local image the read-ahead path measured faster (fanstore-dlio, 4 reader threads on
  // 2 cores: cosmoflow 5,384-5,408 samples/s against 4,824-5,109 loading straight into the buffer, unet3d 721-724
  // against 647-668), while for a remote one it saves a round trip's worth of waiting per chunk.
  if (r.last == r.first || core_.img.HasPartition(e_.part) || !core_.remote) return direct;
  for (uint64_t i = r.first; i <= r.last; ++i) {
    const uint64_t from = i << shift_, to = std::min<uint64_t>(from + (uint64_t{1} << shift_), e_.size);
    if (from >= r.off && to <= r.end && !core_.cache.Has(e_.id, i)) direct.push_back(i);
  }
  if (direct.size() < 2) direct.clear();  // one chunk: the reader's own load is as good
  return direct;
}

Result<size_t> ClientFile::Visit(uint64_t off, size_t n, const std::function<size_t(const char*, size_t)>& sink) {
  Range r;
  if (!StartRead(off, n, &r)) return size_t{0};
  const uint64_t end = r.end, first = r.first, last = r.last;
  const bool streaming = r.streaming;
  size_t done = 0;
  for (uint64_t i = first; i <= last; ++i) {
    reading_.store(i, std::memory_order_relaxed);
    auto c = core_.img.GetChunk(e_, i);
    if (!c.ok()) return core_.Report(e_, c.status());
    auto bytes = core_.GetChunk(e_, *c);
    if (!bytes.ok()) return core_.Report(e_, bytes.status());
    const uint64_t from = std::max(off, c->raw_offset) - c->raw_offset;
    const uint64_t to = std::min(end, c->raw_offset + c->raw_size) - c->raw_offset;
    const size_t len = static_cast<size_t>(to - from);
    const size_t took = sink((*bytes)->data() + from, len);
    done += took;
    if (took < len) break;
    // A streaming reader that has consumed a chunk to its end will not come back: drop it behind itself.
    if (streaming && to == c->raw_size && chunks_ > 1) core_.cache.Drop(e_.id, i);
  }
  core_.stats.bytes_read.fetch_add(done, std::memory_order_relaxed);
  return done;
}

Result<size_t> ClientFile::ReadAt(uint64_t off, void* buf, size_t n) {
  Range r;
  if (!StartRead(off, n, &r, /*queue_span=*/false)) return size_t{0};
  const uint64_t end = r.end, first = r.first, last = r.last;
  const bool streaming = r.streaming;
  n = static_cast<size_t>(end - off);
  char* out = static_cast<char*>(buf);
  // A read spanning several chunks of a remote file (a whole file read at once): the chunks it covers whole are
  // fetched from the daemon in parallel by the decode threads and this one, straight into `buf`: no chunk buffer
  // to fault in, no second copy out of the chunk cache. Queued read-ahead of them stands down (reading_).
  // The others (a partial first or last chunk, cached ones) are the loop's; a partial last one is queued.
  const std::vector<uint64_t> direct = DirectChunks(r);
  if (!direct.empty()) {
    reading_.store(direct.back(), std::memory_order_relaxed);
    if (direct.back() != last) Prefetch(last, last);
    const ClientCore::Offer offer = StreamOffer();
    Status s = core_.ParallelFor(direct.size(), [&](uint64_t k) -> Status {
      auto c = core_.img.GetChunk(e_, direct[k]);
      if (!c.ok()) return c.status();
      char* dst = out + (c->raw_offset - off);
      Status ls = core_.LoadChunkInto(e_, *c, dst, offer);
      if (ls.ok()) KeepDecoded(*c, dst, streaming);
      return ls;
    });
    if (!s.ok()) {
      std::memset(out, 0, n);  // no unverified byte is left in the caller's buffer
      return core_.Report(e_, s);
    }
  } else if (last > first) {
    Prefetch(first + 1, last);
  }
  size_t next_direct = 0;
  for (uint64_t i = first; i <= last; ++i) {
    if (next_direct < direct.size() && direct[next_direct] == i) {
      ++next_direct;
      continue;
    }
    if (i > reading_.load(std::memory_order_relaxed)) reading_.store(i, std::memory_order_relaxed);
    auto c = core_.img.GetChunk(e_, i);
    if (!c.ok()) return core_.Report(e_, c.status());
    const uint64_t from = std::max(off, c->raw_offset) - c->raw_offset;
    const size_t len = static_cast<size_t>(std::min(end, c->raw_offset + c->raw_size) - c->raw_offset - from);
    char* dst = out + (c->raw_offset + from - off);
    if (auto cached = core_.cache.Find(e_.id, i)) {
      core_.stats.cache_hits.fetch_add(1, std::memory_order_relaxed);
      std::memcpy(dst, cached->data() + from, len);
      if (streaming && from + len == c->raw_size && chunks_ > 1) core_.cache.Drop(e_.id, i);
      continue;
    }
    if (from == 0 && len == c->raw_size) {
      // The whole chunk, not cached: decoded (or read from the node chunk cache) straight into the caller's buffer.
      // Whole chunks of a large file are what streams read: shared only if others read this file too.
      Status s = core_.LoadChunkInto(e_, *c, dst, chunks_ > 1 ? StreamOffer() : ClientCore::Offer::kShare);
      if (!s.ok()) {
        std::memset(dst, 0, len);  // no unverified byte is left in the caller's buffer
        return core_.Report(e_, s);
      }
      KeepDecoded(*c, dst, streaming);
      continue;
    }
    if (core_.node && core_.node->ReadRange(e_, *c, from, len, dst)) {
      core_.stats.node_hits.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // Parts of a large file: other parts of this chunk are likely read at random later, by this process or another.
    // A one-chunk file read in parts stays in this process's cache, which serves its later parts.
    auto bytes = core_.GetChunk(e_, *c, chunks_ > 1 ? ClientCore::Offer::kPart : ClientCore::Offer::kShare);
    if (!bytes.ok()) return core_.Report(e_, bytes.status());
    std::memcpy(dst, (*bytes)->data() + from, len);
    if (streaming && from + len == c->raw_size && chunks_ > 1) core_.cache.Drop(e_.id, i);
  }
  core_.stats.bytes_read.fetch_add(n, std::memory_order_relaxed);
  return n;
}

void ClientFile::KeepDecoded(const Chunk& c, const char* bytes, bool streaming) {
  // What was expensive to decode, for this process's next read of it.
  if (core_.node || c.codec != Codec::kZstd || core_.cache.budget() == 0 || streaming) return;
  if (auto copy = OwnedBytes::Allocate(c.raw_size, core_.buffers)) {
    std::memcpy(copy->writable(), bytes, c.raw_size);
    core_.cache.Put(e_.id, c.index, std::move(copy));
  }
}

// The reads of a kernel fd (fopen, mmap, np.fromfile...) never reach us: the whole file counts once, when handed out.
Result<int> ClientFile::KernelFd(int flags) {
  auto fd = MakeKernelFd(flags);
  if (fd.ok()) core_.stats.bytes_read.fetch_add(e_.size, std::memory_order_relaxed);
  return fd;
}

Result<int> ClientFile::MakeKernelFd(int flags) {
  // Large files, with a node chunk cache: one shared file per node holds every chunk; fill what is missing.
  if (core_.node && chunks_ > 1) {
    Status s = core_.node->WithFileLock(e_, [this] {
      return core_.ParallelFor(chunks_, [this](uint64_t i) -> Status {
        if (core_.node->HasChunk(e_, i)) return Status::Ok();
        auto c = core_.img.GetChunk(e_, i);
        if (!c.ok()) return c.status();
        PooledBuffer buf(core_.buffers);
        if (buf.get() == nullptr)
          return Status(Code::kNoMemory, "no memory to decode a chunk of " + Printable(e_.path));
        return core_.LoadChunkInto(e_, *c, buf.get(), ClientCore::Offer::kMust);
      });
    });
    if (!s.ok()) return core_.Report(e_, s);
    auto fd = core_.node->OpenComplete(e_, flags);
    if (fd.ok()) return fd;
    // No room or no /proc: a private memfd below.
  }
  if (int fd = core_.CachedMemfd(e_.id, flags); fd >= 0) return fd;
  int mfd = memfd_create("fanstore", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (mfd < 0) return Status::FromErrno(errno, "memfd_create");
  auto fail = [&](Status s) {
    close(mfd);
    return s;
  };
  if (ftruncate(mfd, static_cast<off_t>(e_.size)) != 0) return fail(Status::FromErrno(errno, "sizing a memfd"));
  fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
  if (e_.size > 0) {
    void* p;
    {
      // A fork while we fill it must not give the child a writable mapping: F_SEAL_WRITE would fail (EBUSY).
      std::lock_guard gate(core_.fork_gate);
      p = mmap(nullptr, e_.size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
      if (p != MAP_FAILED) madvise(p, e_.size, MADV_DONTFORK);
    }
    if (p == MAP_FAILED) return fail(Status::FromErrno(errno, "mapping a memfd"));
    char* base = static_cast<char*>(p);
    Status s = core_.ParallelFor(chunks_, [&](uint64_t i) -> Status {
      auto c = core_.img.GetChunk(e_, i);
      if (!c.ok()) return c.status();
      return core_.LoadChunkInto(e_, *c, base + c->raw_offset, ClientCore::Offer::kShare);
    });
    munmap(p, e_.size);
    if (!s.ok()) return fail(core_.Report(e_, s));
  }
  // Sealed: no one (not even an open("/proc/self/fd/N", O_RDWR)) can change the bytes after they were verified.
  if (fcntl(mfd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return fail(Status::FromErrno(errno, "sealing a memfd"));
  // Handed out as read-only reopens (O_RDONLY in F_GETFL, their own offset); the memfd itself is kept for
  // the next open of the same file.
  char proc[64];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", mfd);
  int fd = open(proc, O_RDONLY | (flags & O_CLOEXEC));
  if (fd < 0) {
    // No /proc: hand out the sealed memfd itself, with the caller's close-on-exec choice.
    if (!(flags & O_CLOEXEC)) fcntl(mfd, F_SETFD, 0);
    return mfd;
  }
  core_.KeepMemfd(e_.id, mfd);
  return fd;
}

}  // namespace fanstore::detail
