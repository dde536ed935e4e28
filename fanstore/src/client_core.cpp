// ClientCore: where verified chunk bytes come from, parallel decoding, read-ahead, kept memfds, error lines.
#include "client_core.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <new>
#include <thread>

#include "decode_internal.hpp"
#include "fanstore/protocol/range_check.hpp"
#include "owned_bytes.hpp"
#include "owned_fd.hpp"

namespace fanstore {

namespace detail {

ClientCore::ClientCore(const Image& image, ClientStats& s, const ClientOptions& opts)
    : img(image),
      stats(s),
      remote(opts.remote),
      cache(opts.cache_bytes),
      // A chunk, or the largest stored form of one; a few spares (each resident) for the read-ahead.
      buffers(std::make_shared<BufferPool>(MaxStoredSize(image.ChunkSize()), 4)),
      pool(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u))),
      memfd_cap_(KeptFdCap(64, 8)),  // cached memfds stay open
      report_errors_(opts.report_errors) {}

ClientCore::~ClientCore() {
  // First: decode tasks use the node chunk cache and the chunk cache, which are destroyed after this body.
  pool.Shutdown();
  for (const Memfd& m : memfds_)
    if (NamesFile(m.fd, m.dev, m.ino)) close(m.fd);
}

Status ClientCore::LoadChunkInto(const Entry& e, const Chunk& c, char* out, Offer offer) {
  if (c.codec == Codec::kZero) return DecodeChunk(e, c, nullptr, 0, out);  // a hole: no partition, no daemon
  if (node && node->Read(e, c, out)) {
    stats.node_hits.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  Status s;
  bool fetched = false;
  // Without a daemon every partition is read here, so that one that cannot be read says why (as verify does).
  if (img.HasPartition(e.part) || !remote) {
    if (c.codec == Codec::kZstd) {
      PooledBuffer scratch(buffers);  // the stored bytes; a temporary of ReadChunk's if none could be had
      s = img.ReadChunk(e, c, out, scratch.get());
    } else {
      s = img.ReadChunk(e, c, out);
    }
    stats.local_loads.fetch_add(1, std::memory_order_relaxed);
    // This node's staged copy is damaged (truncated, a flipped bit): the daemon reads the image directory's bytes.
    if (remote && s.code() == Code::kCorrupt && LoadRemoteChunk(e, c, out, /*from_source=*/true).ok()) {
      s = Status::Ok();
      fetched = true;
    }
  } else {
    s = LoadRemoteChunk(e, c, out, /*from_source=*/false);
    // Bytes that failed their checksum on the way (the node's fetch cache, a peer's damaged copy): once more, from
    // the image directory. Should that fail too, the first error says what was wrong.
    if (s.code() == Code::kCorrupt && LoadRemoteChunk(e, c, out, /*from_source=*/true).ok()) s = Status::Ok();
    stats.remote_loads.fetch_add(1, std::memory_order_relaxed);
    fetched = true;
  }
  if (s.ok() && node && WorthSharing(c, offer, fetched)) node->Offer(e, c, out, offer == Offer::kMust);
  return s;
}

bool ClientCore::WorthSharing(const Chunk& c, Offer offer, bool fetched) {
  switch (offer) {
    case Offer::kNone: return false;
    case Offer::kMust:  // a kernel fd is being assembled
    case Offer::kPart:
      // A raw chunk read in parts (random preads, fio psync): every part would pay the checksum of the whole chunk
      // (~0.25 ms per MiB) again, so the node keeps the verified copy and later parts are a copy from it.
      return true;
    case Offer::kShare: break;
  }
  // What was expensive to get. A raw chunk read whole is already in its partition's page cache and costs one pread
  // plus a checksum; one the daemon keeps node-wide (its fetch cache) is not copied here a second time: another
  // process gets it from there for the same copy and checksum, and the node's memory holds it once.
  if (fetched) return c.codec != Codec::kRaw || !remote->CachesNodeWide();
  return c.codec == Codec::kZstd;
}

Status ClientCore::LoadRemoteChunk(const Entry& e, const Chunk& c, char* out, bool from_source) {
  // A raw chunk in the node-wide cache: copied straight into `out` (the reader's buffer, for a whole chunk) and
  // checked there, as a local raw chunk is read into it and checked. A copy that fails its check is asked of the
  // daemon instead, like any miss.
  if (!from_source && c.codec == Codec::kRaw && remote->CopyCached(e.part, c.offset, c.stored_size, out) &&
      DecodeChunk(e, c, out, c.stored_size, out).ok()) {
    stats.remote_bytes.fetch_add(c.stored_size, std::memory_order_relaxed);
    return Status::Ok();
  }
  // Decoded straight from the fetcher's view (the daemon's reply area): no copy of the stored bytes and no fresh
  // buffer to fault in. DecodeChunk checks the bytes it wrote to `out`, not the view, so what is handed out is
  // verified whatever happens to the view meanwhile. (Image::GetChunk made `c`: it lies inside the file's range.)
  auto decode = [&](const char* data, size_t n) {
    stats.remote_bytes.fetch_add(n, std::memory_order_relaxed);
    return DecodeChunk(e, c, data, n, out);
  };
  Status s = from_source ? remote->WithSourceBytes(e.part, c.offset, c.stored_size, decode)
                         : remote->WithStored(e.part, c.offset, c.stored_size, decode);
  if (!s.ok() && s.code() != Code::kCorrupt)
    return Status(s.code(), "remote read of " + Printable(e.path) + ": " + s.message());
  return s;
}

Result<std::shared_ptr<const FileBytes>> ClientCore::GetChunk(const Entry& e, const Chunk& c, Offer offer,
                                                              const std::function<bool()>& wanted) {
  bool hit = false;
  auto r = cache.Get(
      e.id, c.index,
      [&]() -> Result<ChunkCache::Bytes> {
        auto b = OwnedBytes::Allocate(c.raw_size, buffers);
        if (!b)
          return Status(Code::kNoMemory,
                        "cannot allocate " + std::to_string(c.raw_size) + " bytes for " + Printable(e.path));
        Status s = LoadChunkInto(e, c, b->writable(), offer);
        if (!s.ok()) return s;
        return ChunkCache::Bytes(std::move(b));
      },
      &hit, wanted);
  // (`wanted` marks a read-ahead: one finding its chunk already there is no reader's cache hit.)
  if (hit && !wanted) stats.cache_hits.fetch_add(1, std::memory_order_relaxed);
  return r;
}

Status ClientCore::Report(const Entry& e, Status s) {
  stats.errors.fetch_add(1, std::memory_order_relaxed);
  // The file exists (stat shows it): whatever went wrong under it -- a partition gone from the image directory
  // (ENOENT there), a permission, a reply code from the daemon -- is an I/O error to the reader. read(2) has no
  // ENOENT; the message keeps the reason.
  switch (s.code()) {
    case Code::kIoError:
    case Code::kCorrupt:
    case Code::kTimeout:
    case Code::kNoMemory:
    case Code::kInvalidArgument:
    case Code::kIsDirectory: break;
    default: s = Status(Code::kIoError, s.message());
  }
  bool first;
  {
    std::lock_guard<std::mutex> lk(report_mu_);
    first = reported_.insert(e.id).second;
  }
  if (first && report_errors_) std::fprintf(stderr, "fanstore: %s\n", s.ToString().c_str());
  return s;
}

Status ClientCore::ParallelFor(uint64_t n, const std::function<Status(uint64_t)>& fn) {
  struct Shared {
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::condition_variable cv;
    int active = 0;
    Status first_error;
  };
  auto sh = std::make_shared<Shared>();
  // Runs by the caller and by helpers; a helper that starts late finds nothing left and returns at once.
  auto run = [sh, n, &fn](bool helper) {
    if (helper) {
      std::lock_guard<std::mutex> lk(sh->mu);
      if (sh->next.load() >= n || sh->failed.load()) return;
      ++sh->active;
    }
    for (uint64_t i; !sh->failed.load() && (i = sh->next.fetch_add(1)) < n;) {
      Status s = fn(i);
      if (!s.ok() && !sh->failed.exchange(true)) {
        std::lock_guard<std::mutex> lk(sh->mu);
        sh->first_error = s;
      }
    }
    if (helper) {
      std::lock_guard<std::mutex> lk(sh->mu);
      --sh->active;
      sh->cv.notify_all();
    }
  };
  // `fn` is referenced by the helpers: the caller waits for every helper that started before returning.
  for (int h = 0; h < pool.threads() && static_cast<uint64_t>(h + 1) < n; ++h)
    if (!pool.Submit([run] { run(true); })) break;
  run(false);
  std::unique_lock<std::mutex> lk(sh->mu);
  sh->cv.wait(lk, [&] { return sh->active == 0; });
  sh->next.store(n);  // helpers not started yet must not touch `fn` once we return
  return sh->first_error;
}

void ClientCore::Prefetch(const Entry& e, uint64_t first, uint64_t last, Offer offer,
                          std::function<bool(uint64_t)> still_wanted) {
  const uint64_t n = img.ChunkCount(e);
  for (uint64_t i = first; i <= last && i < n; ++i) {
    if (cache.Has(e.id, i)) continue;
    auto c = img.GetChunk(e, i);
    if (!c.ok()) return;
    // A raw chunk of a local partition costs its reader one pread and a checksum, straight into the reader's
    // buffer; decoding it ahead would add a copy and use a second core for nothing.
    if (c->codec == Codec::kRaw && img.HasPartition(e.part)) continue;
    // Entry holds views into the index mapping, which outlives the client: safe to copy into the task.
    if (!pool.Submit([this, e, chunk = *c, offer, still_wanted] {
          (void)GetChunk(e, chunk, offer, [&] { return still_wanted(chunk.index); });
        }))
      return;
  }
}

int ClientCore::CachedMemfd(uint32_t id, int flags) {
  std::lock_guard<std::mutex> lk(memfd_mu_);
  for (auto it = memfds_.begin(); it != memfds_.end(); ++it) {
    if (it->id != id) continue;
    char proc[64];
    std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", it->fd);
    int fd = open(proc, O_RDONLY | (flags & O_CLOEXEC));
    // The program may have closed or dup2'ed over our number: then it names another file.
    if (fd >= 0 && !NamesFile(fd, it->dev, it->ino)) {
      close(fd);
      fd = -1;
    }
    if (fd < 0) {
      memfds_.erase(it);
      return -1;
    }
    memfds_.splice(memfds_.begin(), memfds_, it);
    return fd;
  }
  return -1;
}

void ClientCore::KeepMemfd(uint32_t id, int fd) {
  struct stat st;
  if (memfd_cap_ == 0 || fstat(fd, &st) != 0) {
    close(fd);
    return;
  }
  if (fd_hook) fd_hook(fd);
  std::lock_guard<std::mutex> lk(memfd_mu_);
  memfds_.push_front({id, fd, st.st_dev, st.st_ino});
  while (memfds_.size() > memfd_cap_) {
    const Memfd& m = memfds_.back();
    if (NamesFile(m.fd, m.dev, m.ino)) close(m.fd);
    memfds_.pop_back();
  }
}

size_t ClientCore::ReleaseKeptFds() {
  size_t n = node ? node->ReleaseIdle() : 0;
  std::lock_guard<std::mutex> lk(memfd_mu_);
  for (const Memfd& m : memfds_)
    if (NamesFile(m.fd, m.dev, m.ino)) ::close(m.fd);
  n += memfds_.size();
  memfds_.clear();
  return n;
}

void ClientCore::LockForFork() {
  fork_gate.lock();
  cache.LockForFork();
  pool.LockForFork();
  memfd_mu_.lock();
  report_mu_.lock();
  buffers->LockForFork();
  if (node) node->LockForFork();
}

void ClientCore::UnlockForFork(bool child) {
  if (node) node->UnlockForFork();
  buffers->UnlockForFork();
  report_mu_.unlock();
  memfd_mu_.unlock();
  pool.UnlockForFork(child);
  cache.UnlockForFork(child);
  fork_gate.unlock();
}

}  // namespace detail
}  // namespace fanstore
