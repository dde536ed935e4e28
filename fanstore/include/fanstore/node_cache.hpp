// The node-wide decoded-chunk cache: every process of a node that reads one image shares one decoded copy of
// each chunk it caches, and kernel fds of large files (mmap, exec'd children) point at one shared file.
// `fanstore run` joins it (JoinNodeCache) and hands its directory to children in FANSTORE_NODE_CACHE_DIR;
// fanstore::Client attaches to it. Layout, budget and eviction: docs/reading.md, "The node-wide cache".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "fanstore/image.hpp"
#include "fanstore/status.hpp"

namespace fanstore {

struct NodeCacheOptions {
  std::string root = "/dev/shm";  // a tmpfs: the cache directory is made below it
  uint64_t budget = 0;            // bytes of decoded chunks kept; 0 = DefaultNodeCacheBudget(root)
};

// A quarter of physical memory, but at most half of what `root`'s file system has free.
uint64_t DefaultNodeCacheBudget(const std::string& root);

// Creates, or joins when another run on this node uses the same image, the cache directory
// ROOT/fanstore-UID-KEY (KEY: Image::ContentKey; mode 0700), and starts a small detached process that removes it once
// `owner` (the process that then execs the user's program) has exited and no other run uses it. Directories left behind
// by runs that were killed with their reaper (e.g. a whole cgroup) are removed here when unused. Returns the directory
// for FANSTORE_NODE_CACHE_DIR.
Result<std::string> JoinNodeCache(const Image& img, const NodeCacheOptions& opts, pid_t owner);

// The name of the index's copy in a cache directory, which fanstore::Client maps instead of the image's own.
inline constexpr const char* kIndexCopyName = "index.fsi";

// Keeps a copy of `img`'s index in the cache directory `dir` (made once per directory, mode 0400, checked to be the
// same index), so that a `cp` or `rsync --inplace` over the image cannot change the index under its readers.
// Returns the copy's trust token (Image::TrustToken) for FANSTORE_INDEX_TRUST.
Result<std::string> KeepIndexCopy(const Image& img, const std::string& dir);

// The index copy in cache directory `dir` when this user's (KeepIndexCopy made one there) and a copy of the index
// of `image_dir` as it stands (the same header), else "": what a fanstore::Client given `dir` maps
// (ClientOptions::index_file).
std::string IndexCopyIn(const std::string& dir, const std::string& image_dir);

}  // namespace fanstore
