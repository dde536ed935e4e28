// Client side of a node's `fanstore serve` daemon: handshake, readiness wait, and the RemoteFetcher over its socket.
// MPI-free: user processes link only this; the daemon does the MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fanstore/client.hpp"
#include "fanstore/status.hpp"

namespace fanstore {

// What a daemon tells a client on connect.
struct DaemonInfo {
  uint32_t rank = 0, nranks = 0;
  uint32_t timeout_ms = 0;    // the daemon's --timeout: a remote read fails within it
  std::string index_dir;      // open the image here (a copy of index.fsi)
  std::string partition_dir;  // this node's staged partitions (read directly, no round-trip)
  bool staged = false;        // every rank of the job has staged its partitions (the daemon serves before that)
  // Staging is over on every rank that reported, and these did not (dead, or not answering): their partitions
  // are not staged on their nodes. Empty while staging goes on, and once every rank has staged.
  std::vector<uint32_t> unstaged_ranks;
  bool staging_failed = false;  // every rank reported, and some ranks' staging failed (never all staged, then)
};

// Connects to the daemon at `socket_path` and handshakes, giving up after `timeout_ms`.
// kIoError with the reason (no such socket, refused, closed) or kTimeout.
Result<DaemonInfo> ProbeDaemon(const std::string& socket_path, int timeout_ms);

// Retries ProbeDaemon until it succeeds (OK) -- with `staged`, until the daemon says every rank has staged -- or
// `timeout_ms` passes (kTimeout naming the last failure).
Status WaitForDaemon(const std::string& socket_path, int timeout_ms, bool staged = false);

// A RemoteFetcher over the daemon socket. Thread-safe: a small pool of connections, one request in flight
// on each (its payload is read in place from the connection's shared reply area: WithStored copies nothing);
// fork-safe: a child drops inherited connections and reconnects lazily. Every socket wait is bounded by the
// daemon's --timeout, so a dead daemon is kTimeout/kIoError, never a hang.
// "{node}" in socket_path is expanded (fanstore/path_template.hpp), as every front end does.
Result<std::shared_ptr<RemoteFetcher>> ConnectDaemonFetcher(const std::string& socket_path, DaemonInfo* info);

// What a daemon did with a prefetch hint.
struct PrefetchResult {
  uint64_t remote = 0;        // files on other nodes, queued for prefetch into the fetch cache, in order
  uint64_t local = 0;         // files staged on this node (read directly: nothing to fetch)
  uint64_t missing = 0;       // paths that are not files of the image
  uint64_t remote_bytes = 0;  // stored bytes of the queued files
};

// Tells the daemon at `socket_path` which files this node will read next, in order (image-relative paths, e.g.
// "train/n01/x.jpg"). It fetches the remote ones ahead into its fetch cache (fanstore serve --cache-bytes), where
// every client process of the node finds them. A hint replaces the previous one with the same `stream` id
// (one stream per reader, e.g. per rank: each epoch's order replaces the last). Usable from any language: the
// request is documented in docs/daemon.md.
Result<PrefetchResult> SendPrefetchHint(const std::string& socket_path, const std::vector<std::string>& paths,
                                        uint64_t stream, int timeout_ms = 10000);

}  // namespace fanstore
