// Every environment variable FanStore reads, in one place (README.md has the table for users).
#pragma once

namespace fanstore::env {

inline constexpr const char* kImage = "FANSTORE_IMAGE";    // image directory (single node, no daemon)
inline constexpr const char* kMount = "FANSTORE_MOUNT";    // path prefix served from the image; default /fanstore
inline constexpr const char* kDaemon = "FANSTORE_DAEMON";  // Unix socket of this node's daemon (multi-node)
inline constexpr const char* kStats = "FANSTORE_STATS";    // 1: one summary line per process at exit
inline constexpr const char* kLog = "FANSTORE_LOG";        // debug: trace every intercepted call to stderr
inline constexpr const char* kCwd = "FANSTORE_CWD";        // virtual cwd handed to exec'd children
inline constexpr const char* kCacheBytes = "FANSTORE_CACHE_BYTES";  // decoded-chunk cache budget per process
// Node-wide decoded-chunk cache (node_cache.hpp): where `fanstore run` makes it (a tmpfs; "off" disables it),
// its budget in bytes, and the directory it hands to children (internal).
inline constexpr const char* kNodeCache = "FANSTORE_NODE_CACHE";
inline constexpr const char* kNodeCacheBytes = "FANSTORE_NODE_CACHE_BYTES";
inline constexpr const char* kNodeCacheDir = "FANSTORE_NODE_CACHE_DIR";
// Set by `fanstore run` after checking the whole index once: children skip re-hashing it (internal).
inline constexpr const char* kIndexTrust = "FANSTORE_INDEX_TRUST";

inline constexpr const char* kDefaultMount = "/fanstore";

}  // namespace fanstore::env
