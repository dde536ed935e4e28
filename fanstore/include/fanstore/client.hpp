// The FanStore client: what every front end (LD_PRELOAD interposer, FUSE, CLI, trainer) calls.
// Thread-safe; fork-safe once the owner calls the AtFork* hooks (the interposer does).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "fanstore/image.hpp"
#include "fanstore/status.hpp"

namespace fanstore {

// Decoded, checksum-verified bytes of one file. Immutable; shared between opens through the cache.
class FileBytes {
 public:
  virtual ~FileBytes() = default;
  virtual const char* data() const = 0;
  virtual uint64_t size() const = 0;
  // A sealed memfd holding the bytes, when the file was decoded into one (larger files); fd -1 else.
  // OpenFd hands out read-only reopens of it, so a cached file costs no copy per open. dev/ino say
  // which file the fd was at creation: the program may have closed or dup2'ed over that number since.
  struct Memfd {
    int fd = -1;
    dev_t dev = 0;
    ino_t ino = 0;
  };
  virtual Memfd memfd() const { return {}; }
};

// Where stored bytes of partitions that are not on this node come from (multi-node: the node's daemon).
class RemoteFetcher {
 public:
  virtual ~RemoteFetcher() = default;
  // Fills `out` with the stored (compressed) bytes of `e`: the range [e.offset, e.offset + e.stored_size) of
  // partition e.part. Must fail within its timeout, never hang.
  virtual Status FetchStored(const Entry& e, std::string* out) = 0;
  // Calls `use` once with the stored bytes [offset, offset + length) of partition `part`, valid only during the
  // call (the daemon fetcher passes a view of its shared reply area: no copy), and returns use's status, or the
  // fetch error without calling it. The default fetches into memory with FetchStored.
  using StoredUse = std::function<Status(const char* data, size_t size)>;
  virtual Status WithStored(uint32_t part, uint64_t offset, uint64_t length, const StoredUse& use);
  Status WithStored(const Entry& e, const StoredUse& use) { return WithStored(e.part, e.offset, e.stored_size, use); }
  // Called in a forked child: drop connections the child must not share with its parent.
  virtual void AfterForkChild() {}
  // pthread_atfork prepare/parent: hold (then release) the fetcher's locks across fork, so the child never
  // inherits them held or its state half-updated. Client::AtForkPrepare/AtForkParent call these.
  virtual void AtForkPrepare() {}
  virtual void AtForkParent() {}
  // Called with every fd the fetcher keeps for itself (connections, passed memfds while held): the
  // interposer marks them internal so the program's close-all loops spare them. Null: no marking.
  virtual void SetInternalFdHook(void (*hook)(int fd)) { (void)hook; }
};

struct ClientStats {
  std::atomic<uint64_t> opens{0}, stats{0}, readdirs{0}, lookups_missing{0};
  std::atomic<uint64_t> bytes_read{0};            // decoded bytes handed out
  std::atomic<uint64_t> local_loads{0}, remote_loads{0}, cache_hits{0};
  std::atomic<uint64_t> remote_bytes{0};          // stored bytes fetched remotely
  std::atomic<uint64_t> errors{0};
  // "fanstore[pid 123]: opens=.. stats=.. readdirs=.. bytes=.. local=.. remote=.. cache_hits=.. errors=.."
  std::string Line() const;
};

struct ClientOptions {
  std::string image;                  // image directory (index + partitions, or the index of a daemon)
  std::string mount = "/fanstore";    // prefix the image is served under (front ends only)
  std::string partition_dir;          // where local partitions live; empty = the image directory
  uint64_t cache_bytes = 256ull << 20; // budget of the decoded-file cache (0 disables it)
  std::shared_ptr<RemoteFetcher> remote;  // for partitions not present locally; null = single node
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> Create(const ClientOptions& opts);
  // Reads FANSTORE_IMAGE, FANSTORE_MOUNT, FANSTORE_DAEMON, FANSTORE_CACHE_BYTES (see env.hpp).
  static Result<std::unique_ptr<Client>> FromEnv();
  ~Client();

  const Image& image() const { return *image_; }
  const std::string& mount() const { return opts_.mount; }
  ClientStats& stats() { return stats_; }

  // Image-relative, normalised path -> entry id. kNotFound / kNotDirectory as POSIX would say.
  Result<uint32_t> Lookup(std::string_view rel);
  // stat(2) data of an entry: stable st_ino, st_dev of the image, uid/gid of this process.
  void FillStat(uint32_t id, struct stat* st) const;
  // The decoded bytes of a file (cached within the budget). kIsDirectory for a directory,
  // kCorrupt on a checksum mismatch (and one line on stderr), kIoError when a partition is unreadable.
  Result<std::shared_ptr<const FileBytes>> Load(uint32_t id);
  // A real kernel fd, opened read-only, whose bytes are the file's bytes (so mmap, sendfile,
  // fdopen, dup and children all work). `flags` may carry O_CLOEXEC; write access is kReadOnly.
  Result<int> OpenFd(uint32_t id, int flags);
  // OpenFd in two steps, for a front end that serves reads itself and makes a kernel fd only when one
  // is needed (the interposer's lazy fds): OpenBytes is Load counted as an open (stats().opens,
  // bytes_read); FdForBytes is a real read-only kernel fd holding `b` (file offset 0), not counted.
  Result<std::shared_ptr<const FileBytes>> OpenBytes(uint32_t id);
  Result<int> FdForBytes(const FileBytes& b, int flags);

  // Files of at least this many bytes are decoded straight into a memfd (so OpenFd reopens instead of
  // copying); smaller ones into plain memory. Default: 64 KiB (decoded_cache.hpp). A front end that
  // rarely needs kernel fds (the interposer's lazy fds) raises it: cached memfds are capped by the fd
  // budget, plain memory only by the byte budget. Set before the first Load.
  void SetMemfdMinBytes(uint64_t bytes) { memfd_min_bytes_ = bytes; }

  // Called with every fd the client keeps open for itself (cached memfds), so a front end can protect
  // them from the program's close loops (the interposer marks them internal).
  // The hook is forwarded to the RemoteFetcher (its daemon connections are the client's fds too).
  void SetInternalFdHook(void (*hook)(int fd)) {
    internal_fd_hook_ = hook;
    if (opts_.remote) opts_.remote->SetInternalFdHook(hook);
  }

  // pthread_atfork hooks: no lock may be held across fork, and the child drops shared connections.
  void AtForkPrepare();
  void AtForkParent();
  void AtForkChild();

  struct Cache;
 private:
  Client(ClientOptions opts, std::shared_ptr<const Image> image);
  ClientOptions opts_;
  std::shared_ptr<const Image> image_;
  std::unique_ptr<Cache> cache_;
  mutable ClientStats stats_;  // counters only: bumped from const lookups too
  dev_t dev_;
  void (*internal_fd_hook_)(int) = nullptr;
  uint64_t memfd_min_bytes_ = 0;  // 0: decoded_cache.hpp's kMemfdThreshold
};

}  // namespace fanstore
