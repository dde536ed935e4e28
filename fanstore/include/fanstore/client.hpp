// The FanStore client: what every front end (LD_PRELOAD interposer, FUSE, CLI, trainer) calls.
// Reads are range-based: a read decodes and verifies only the chunks it touches. Thread-safe; fork-safe once
// the owner calls the AtFork* hooks around fork() (the interposer and the FUSE server do).
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

// Decoded, checksum-verified bytes (a chunk, or a whole file from Client::Load). Immutable.
class FileBytes {
 public:
  virtual ~FileBytes() = default;
  virtual const char* data() const = 0;
  virtual uint64_t size() const = 0;
};

// Where stored bytes of partitions that are not on this node come from (multi-node: the node's daemon, made by
// ConnectDaemonFetcher in fanstore/daemon_client.hpp). Opaque to users: its interface is private to the library
// (fanstore/src/remote_fetcher.hpp).
class RemoteFetcher;

struct ClientStats {
  std::atomic<uint64_t> opens{0}, stats{0}, readdirs{0}, lookups_missing{0};
  std::atomic<uint64_t> bytes_read{0};  // decoded bytes handed out: read, or a whole file as a kernel fd
  std::atomic<uint64_t> local_loads{0}, remote_loads{0}, cache_hits{0};  // chunks: decoded here / fetched / hit
  std::atomic<uint64_t> node_hits{0};                                    // chunks read from the node-wide cache
  std::atomic<uint64_t> remote_bytes{0};                                 // stored bytes fetched remotely
  std::atomic<uint64_t> errors{0};
  // "fanstore[pid 123]: opens=.. stats=.. readdirs=.. bytes=.. local=.. remote=.. cache_hits=.. errors=.."
  std::string Line() const;
  // Back to zero: a forked child counts its own work, not its parent's again.
  void Reset();
};

struct ClientOptions {
  std::string image;                    // image directory (index + partitions, or the index of a daemon)
  std::string mount = "/fanstore";      // prefix the image is served under (front ends only)
  std::string partition_dir;            // where local partitions live; empty = the image directory
  uint64_t cache_bytes = 256ull << 20;  // budget of this process's decoded-chunk cache (0 disables it)
  std::string node_cache_dir;           // the node-wide decoded-chunk cache (node_cache.hpp); empty = none
  std::string index_trust;              // Image::TrustToken() of a fully checked open (ImageOpenOptions)
  // ImageOpenOptions::index_file. Empty: node_cache_dir's copy of the index when it holds one (fanstore run puts
  // it there), else the image's own.
  std::string index_file;
  std::shared_ptr<RemoteFetcher> remote;  // for partitions not present locally; null = single node
  // The first error of each file is said in one "fanstore: ..." line on stderr: the front ends' programs see only
  // EIO. A command that says why itself turns it off.
  bool report_errors = true;
};

namespace detail {
struct ClientCore;  // caches, decode threads and the node-wide cache: fanstore/src/client_core.hpp
}

// One open image file. Reads decode and verify only the chunks they touch, from this process's chunk cache,
// the node-wide cache or the partition; sequential reads decode the chunks ahead in parallel. Thread-safe.
class OpenFile {
 public:
  virtual ~OpenFile() = default;
  virtual uint32_t id() const = 0;
  virtual uint64_t size() const = 0;
  // Copies up to n bytes at `offset` into buf; returns the count (0 at or past the end). On an error nothing
  // in buf may be used: kCorrupt (one line on stderr, EIO at the front ends), kIoError, kNoMemory.
  virtual Result<size_t> ReadAt(uint64_t offset, void* buf, size_t n) = 0;
  // The same bytes without a copy: `sink` gets verified spans covering [offset, offset + n) clipped to the end,
  // in order; it returns how many bytes of the span it took (less stops the walk). Returns the total taken.
  // The spans stay valid during the sink call only.
  virtual Result<size_t> Visit(uint64_t offset, size_t n,
                               const std::function<size_t(const char* p, size_t len)>& sink) = 0;
  // A real kernel fd, opened read-only at offset 0, whose bytes are the file's (mmap, sendfile, exec'd
  // children): a file of the node-wide cache shared by every process of the node when there is one,
  // else a sealed memfd of this process. Decodes every chunk not decoded yet. `flags`: O_CLOEXEC.
  virtual Result<int> KernelFd(int flags) = 0;
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> Create(const ClientOptions& opts);
  // Reads FANSTORE_IMAGE, FANSTORE_MOUNT, FANSTORE_DAEMON, FANSTORE_CACHE_BYTES, FANSTORE_NODE_CACHE_DIR and
  // FANSTORE_INDEX_TRUST (see env.hpp).
  static Result<std::unique_ptr<Client>> FromEnv();
  ~Client();

  const Image& image() const { return *image_; }
  const std::string& mount() const { return opts_.mount; }
  ClientStats& stats() { return stats_; }

  // Image-relative, normalised path -> entry id. kNotFound / kNotDirectory as POSIX would say. Symlinks are not
  // followed: a path through one is kNotDirectory (Resolve follows them).
  Result<uint32_t> Lookup(std::string_view rel);
  // Where a path leads once the symlinks in it are followed as the kernel follows them: every one on the way, and
  // the last component's too when `follow_last` (stat, open) but not otherwise (lstat, readlink). kLoop after 40
  // links (ELOOP), kNameTooLong when a substituted path reaches PATH_MAX, else Lookup's errors.
  struct Target {
    uint32_t id = 0;      // the entry reached, when `outside` is empty
    std::string outside;  // the path left the image (an absolute target outside mount(), or ".." above the
                          // root): the absolute, lexically normalised path for the real file system
  };
  // On a miss (kNotFound, kNotDirectory), `missing` (if given) gets the link-free path that was not there: a front
  // end that creates names creates that one, as the kernel creates a dangling link's target.
  // `may_follow` (if given) is asked about each symlink before it is followed, with `ctx`: a front end that checks
  // search permission checks the directories the walk passed to reach it. False ends the walk with kPermission.
  using LinkCheck = bool (*)(void* ctx, uint32_t link);
  Result<Target> Resolve(std::string_view rel, bool follow_last = true, std::string* missing = nullptr,
                         LinkCheck may_follow = nullptr, void* ctx = nullptr);
  // stat(2) data of an entry: stable st_ino, st_dev of the image, uid/gid as packed (this process's for a
  // version-2 image, which stores none).
  void FillStat(uint32_t id, struct stat* st) const;
  // Opens file `id` (counted in stats().opens): kIsDirectory for a directory, kCorrupt for an entry whose
  // chunk layout is impossible. Reads nothing: a damaged chunk fails (EIO) at the first read that touches it.
  Result<std::shared_ptr<OpenFile>> Open(uint32_t id);
  // The whole file decoded into memory (tools and tests; large files belong to Open + ReadAt).
  Result<std::shared_ptr<const FileBytes>> Load(uint32_t id);
  // Open + KernelFd in one call. `flags` may carry O_CLOEXEC; write access is kReadOnly.
  Result<int> OpenFd(uint32_t id, int flags);

  // Called with every fd the client keeps open for itself (cached memfds, node-chunk-cache files), so a front end
  // can protect them from the program's close loops (the interposer marks them internal).
  // The hook is forwarded to the RemoteFetcher (its daemon connections are the client's fds too).
  void SetInternalFdHook(void (*hook)(int fd));
  // Closes the fds the client keeps only for later (cached memfds, idle node-chunk-cache files) and returns how many
  // there were: a front end whose program met EMFILE calls it, then retries.
  size_t ReleaseKeptFds();
  // Runs first on every worker thread the client starts (decoding, read-ahead, remote reads): the interposer marks
  // such a thread as its own, so the client's calls there (close of its fds) are not taken for the program's.
  void SetWorkerThreadHook(void (*hook)());

  // pthread_atfork hooks: no lock may be held across fork, and the child drops shared connections and
  // the decode work its parent's threads had in flight.
  void AtForkPrepare();
  void AtForkParent();
  void AtForkChild();

 private:
  Client(ClientOptions opts, std::shared_ptr<const Image> image);
  ClientOptions opts_;
  std::shared_ptr<const Image> image_;
  mutable ClientStats stats_;  // counters only: bumped from const lookups too
  dev_t dev_;
  std::unique_ptr<detail::ClientCore> core_;
};

}  // namespace fanstore
