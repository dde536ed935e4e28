// The daemon's Unix-socket front: serves hellos, fetches, prefetch hints and the fetch cache's memfd to this node's
// clients (the owner's uid, root, and what --socket-mode / --group allow, checked with SO_PEERCRED). Replies land in
// each connection's shared reply area (a size-sealed memfd mapped once by both sides). One request at a time per
// connection -- pipelined ones wait in its socket -- so it pins at most its area (or one memfd for a payload bigger
// than areas may grow), whatever the client does. epoll: idle connections cost nothing. No thread of its own: the
// daemon's progress thread calls Poll.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "byte_range.hpp"
#include "fanstore/protocol/daemon_wire.hpp"
#include "fanstore/status.hpp"
#include "stats.hpp"

namespace fanstore::daemon {

// A connection's reply area, or a one-off memfd for a payload bigger than areas may grow. Daemon side: mapped
// read-write. `poisoned`: an abandoned MPI receive may still write it, so it is never handed out again.
struct ReplyArea {
  int fd = -1;  // kept until passed to the client
  char* base = nullptr;
  uint64_t size = 0;
  bool oneoff = false;
  bool poisoned = false;
  ~ReplyArea();
};

// What a client asked for, handled by the router (fetch_router.hpp).
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  virtual void OnFetch(uint64_t conn, uint64_t req_id, const ByteRange& r) = 0;
  // A fetch with kFromSource: what this node gave for `r` failed its checksum in the client.
  virtual void OnFetchFromSource(uint64_t conn, uint64_t req_id, const ByteRange& r) = 0;
  enum class PathKind { kRemote, kLocal, kMissing };
  // What an image-relative path is to this node (for a prefetch hint): *r is its stored range when remote.
  virtual PathKind Resolve(std::string_view path, ByteRange* r) = 0;
  // Takes a hint (kInvalidArgument: refused, e.g. too long; the client gets the reason).
  virtual Status OnHint(uint64_t stream, std::vector<ByteRange> ranges, bool append) = 0;
};

struct ServerOptions {
  daemon_proto::HelloInfo hello;
  uint32_t partitions = 0;               // fetches name a partition below this
  uint64_t area_max = 64ull << 20;       // a reply area grows up to this; bigger payloads travel in a one-off memfd
  mode_t socket_mode = 0600;             // permission bits of the socket file
  gid_t group = static_cast<gid_t>(-1);  // --group: the socket's group; its members may connect
  uint64_t max_hint_paths = 1u << 24;    // a hint longer than this is refused
  int cache_fd = -1;                     // the fetch cache's shared memfd (passed on kCacheMap); -1: none
};

class SocketServer {
 public:
  SocketServer(ServerOptions o, DaemonStats* stats);
  ~SocketServer();
  void SetHandler(RequestHandler* h);
  // Every rank has reported its staging: hellos say so from now on (kHelloStaged, or kHelloStagingFailed when
  // `failed`: some ranks' staging failed). The progress thread's call.
  void SetStaged(bool failed);
  // Staging is over on every rank that reported, and `ranks` did not report (dead, or not answering): hellos
  // say so (kHelloUnstaged, to clients that ask), until SetStaged. The progress thread's call.
  void SetUnstaged(const std::vector<int>& ranks);

  // Listens under a temporary name next to `path` (so clients cannot connect before Publish), with the
  // socket's mode and group set before anyone could connect. Refuses a path where a live daemon answers (or one
  // it cannot check: another user's); replaces a stale socket left by a killed one.
  Status Bind(const std::string& path);
  // Whether `path` can be bound and connected to: at most 107 bytes, in a directory that exists.
  static Status CheckPath(const std::string& path);
  // Renames the socket to its final path, never over another daemon's (RENAME_NOREPLACE): from now on
  // `fanstore wait` and clients see it.
  Status Publish();
  // Serves an already connected socket (one end of a socketpair: the protocol fuzzer, tests) as if it had been
  // accepted, credentials checked alike; the server owns fd from here on, even on error.
  Status Adopt(int fd);
  // Handles client I/O, waiting at most timeout_us for some (0: just look); true when anything happened.
  bool Poll(int64_t timeout_us);
  // Interrupts a Poll in progress; any thread.
  void Wake();
  // Poll also wakes for `fd` (the doorbell): it calls on_ready, which must drain it, and counts as activity.
  // After Bind; one fd.
  void Watch(int fd, std::function<void()> on_ready);
  // Removes the socket file (clients can no longer connect); any thread, idempotent.
  void Unpublish();
  // Closes every connection (clients then get EIO at once) and removes the socket. Not concurrent with Poll.
  void Stop();

  // For the router: memory where `n` bytes of a reply for `conn` may land -- its reply area (grown or replaced as
  // needed), or a one-off memfd past the area limit. Null: the connection is gone or no memory could be had.
  std::shared_ptr<ReplyArea> LandFor(uint64_t conn, uint64_t n);
  // Answers fetch `req_id` of `conn` with `n` bytes at `data`: in place when they lie in the connection's
  // area or one-off memfd, else copied there. A gone connection is ignored. A success whose n is not the length
  // the fetch asked for is answered with an error instead (nothing is copied).
  void Deliver(uint64_t conn, uint64_t req_id, const Status& s, const char* data, uint64_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fanstore::daemon
