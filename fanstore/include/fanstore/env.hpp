// Every environment variable FanStore reads, in one place (README.md has the table for users).
#pragma once

namespace fanstore::env {

inline constexpr const char* kImage = "FANSTORE_IMAGE";    // image directory (single node, no daemon)
inline constexpr const char* kMount = "FANSTORE_MOUNT";    // path prefix served from the image; default /fanstore
inline constexpr const char* kDaemon = "FANSTORE_DAEMON";  // Unix socket of this node's daemon (multi-node)
inline constexpr const char* kStats = "FANSTORE_STATS";    // 1: one summary line per process at exit
inline constexpr const char* kLog = "FANSTORE_LOG";        // debug: trace every intercepted call to stderr
inline constexpr const char* kCwd = "FANSTORE_CWD";        // virtual cwd handed to exec'd children
inline constexpr const char* kCacheBytes = "FANSTORE_CACHE_BYTES";  // decoded-file cache budget per process
inline constexpr const char* kSlurmNodeName = "SLURMD_NODENAME";    // set by Slurm in a job step: what {node} becomes

inline constexpr const char* kDefaultMount = "/fanstore";

}  // namespace fanstore::env
