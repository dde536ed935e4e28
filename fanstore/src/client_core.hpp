// What a Client shares between its open files: the chunk cache, the decode threads, the node-wide cache, the
// memfds it keeps for kernel fds, and the one place that decides where a chunk's verified bytes come from.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "chunk_cache.hpp"
#include "decode_pool.hpp"
#include "fanstore/client.hpp"
#include "node_cache.hpp"
#include "owned_bytes.hpp"
#include "remote_fetcher.hpp"

namespace fanstore::detail {

struct ClientCore {
  ClientCore(const Image& image, ClientStats& stats, const ClientOptions& opts);
  ~ClientCore();

  // How a chunk being loaded is offered to the node chunk cache.
  enum class Offer {
    kShare,  // worth sharing (a random or partial read, a small file, a large file read again)
    kNone,   // the first stream through a large file on this node: not copied (see ClientFile::ShareStream)
    kMust,   // a kernel fd is being assembled: kept even over budget
    kPart,   // a part of a chunk was read: shared even when raw (see WorthSharing)
  };
  // Chunk `c` of `e`, verified: this process's cache, a load in flight, the node chunk cache, or decoded now.
  // `wanted`: see ChunkCache::Get (null bytes when it says no).
  Result<std::shared_ptr<const FileBytes>> GetChunk(const Entry& e, const Chunk& c, Offer offer = Offer::kShare,
                                                    const std::function<bool()>& wanted = nullptr);
  // The same bytes written into `out` without entering this process's cache.
  Status LoadChunkInto(const Entry& e, const Chunk& c, char* out, Offer offer);
  // Counts a failed read of `e` and prints its one line on stderr (once per file and process). The status
  // returned is one read(2) can give: a kNotFound, kPermission... from below becomes kIoError (EIO).
  Status Report(const Entry& e, Status s);
  // Runs fn(i) for i in [0, n) on the calling thread and the decode threads; returns when all are done.
  // The first error stops the rest and is returned.
  Status ParallelFor(uint64_t n, const std::function<Status(uint64_t)>& fn);
  // Queues decodes of chunks [first, last] of `e` that are neither cached nor in flight (read-ahead). A queued
  // decode runs only if `still_wanted(i)` holds when its turn comes, asked under the cache's lock (the reader
  // may have reached or passed it, and then loads it itself).
  void Prefetch(const Entry& e, uint64_t first, uint64_t last, Offer offer, std::function<bool(uint64_t)> still_wanted);

  // A read-only reopen of a cached sealed memfd of `id`, or -1.
  int CachedMemfd(uint32_t id, int flags);
  void KeepMemfd(uint32_t id, int fd);
  // Closes the fds kept for later (cached memfds, idle node-chunk-cache files); how many there were.
  size_t ReleaseKeptFds();

  const Image& img;
  ClientStats& stats;
  std::shared_ptr<RemoteFetcher> remote;
  ChunkCache cache;
  std::shared_ptr<BufferPool> buffers;  // chunk-sized buffers, recycled
  DecodePool pool;
  std::unique_ptr<NodeCache> node;
  void (*fd_hook)(int) = nullptr;

 private:
  struct Memfd {
    uint32_t id;
    int fd;
    dev_t dev;
    ino_t ino;
  };
  std::mutex memfd_mu_;
  std::list<Memfd> memfds_;  // most recent first
  size_t memfd_cap_;
  std::mutex report_mu_;
  std::unordered_set<uint32_t> reported_;
  bool report_errors_;
  // Whether chunk `c`, just loaded (`fetched`: from another node), goes to the node chunk cache.
  bool WorthSharing(const Chunk& c, Offer offer, bool fetched);
  // A remote chunk, decoded and verified into `out`.
  // `from_source`: the node's bytes for the chunk failed their checksum; ask for the image directory's.
  Status LoadRemoteChunk(const Entry& e, const Chunk& c, char* out, bool from_source);

 public:
  // Held from mapping a memfd writable to its MADV_DONTFORK, and by LockForFork: a child forked in between keeps a
  // writable mapping, and F_SEAL_WRITE fails (EBUSY) for as long as it lives. Not a shared lock: the kernel takes
  // mmap's lock for writing anyway, and glibc's rwlock cannot be released in the child (another thread id).
  std::mutex fork_gate;
  // fork: hold every lock across fork() (taken in this order), release on both sides.
  void LockForFork();
  void UnlockForFork(bool child);
};

}  // namespace fanstore::detail
