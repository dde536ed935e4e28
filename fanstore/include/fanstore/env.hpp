// Every environment variable the library and the programs read at run time, in one table; the scripts' and the tests'
// are in env_tooling.hpp (not installed). README.md's tables are generated from both, and the test meta.env_table
// fails when README.md differs or when a file in the tree reads a variable that neither lists. Adding a variable is
// one X(...) line in FANSTORE_ENV_VARIABLES here, or in FANSTORE_TOOLING_ENV_VARIABLES there.
#pragma once

#include <cstdint>
#include <optional>

namespace fanstore::env {

// Who reads a variable, which decides the README table it appears in.
enum class Scope {
  kRuntime,  // the library and the programs at run time (interposer, Client::FromEnv, fanstore run/serve/mount)
  kScript,   // scripts/ (build, test, demo, benchmarks, launch examples)
  kTest,     // test plumbing: set by ctest or a test driver for the script it runs, rarely by hand
};

// X(identifier, "NAME", scope, "read by", "meaning", "default"). Markdown (`code`) is fine in the strings.
// (one row per variable, aligned as a table: clang-format leaves it alone)
// clang-format off
#define FANSTORE_ENV_VARIABLES(X)                                                                                           \
  X(kImage, "FANSTORE_IMAGE", Scope::kRuntime, "interposer, `Client::FromEnv`",                                             \
    "image directory to serve (set by `fanstore run --image`)", "unset: everything passes through")                         \
  X(kDaemon, "FANSTORE_DAEMON", Scope::kRuntime, "interposer, `Client::FromEnv`",                                           \
    "Unix socket of this node's `fanstore serve` (multi-node; set by `fanstore run --daemon`, absolute; wins over "        \
    "`FANSTORE_IMAGE`; `{node}` is this node's name; a relative path is taken from each process's working directory "      \
    "when it opens the client)",                                                                                            \
    "unset")                                                                                                                \
  X(kMount, "FANSTORE_MOUNT", Scope::kRuntime, "interposer, `Client::FromEnv`",                                             \
    "absolute path prefix served from the image; it need not exist", "`/fanstore`")                                         \
  X(kStats, "FANSTORE_STATS", Scope::kRuntime, "interposer, `fanstore mount`",                                              \
    "`1`: one summary line per process at exit (ops, bytes, local/remote, cache hits)", "off")                              \
  X(kLog, "FANSTORE_LOG", Scope::kRuntime, "interposer",                                                                    \
    "`debug`: one stderr line per path call on the image (open, stat, readdir, exec...; not the reads of an open file)",  \
    "off")                                                                                                                  \
  X(kCacheBytes, "FANSTORE_CACHE_BYTES", Scope::kRuntime, "interposer, `Client::FromEnv`",                                  \
    "decoded-chunk cache budget per process, in bytes (0 disables it)", "268435456 (256 MiB)")                              \
  X(kNodeCache, "FANSTORE_NODE_CACHE", Scope::kRuntime, "`fanstore run`",                                                   \
    "tmpfs directory under which `fanstore run` makes the node-wide decoded-chunk cache; `off` disables it",                \
    "`/dev/shm`")                                                                                                           \
  X(kNodeCacheBytes, "FANSTORE_NODE_CACHE_BYTES", Scope::kRuntime, "`fanstore run`",                                        \
    "budget of the node-wide decoded-chunk cache, in bytes", "a quarter of RAM, at most half of the tmpfs's free space")    \
  X(kNodeCacheDir, "FANSTORE_NODE_CACHE_DIR", Scope::kRuntime, "interposer, `Client::FromEnv`",                             \
    "the node chunk cache directory handed to children (set by `fanstore run`, not by users)", "unset: no node chunk cache")\
  X(kIndexTrust, "FANSTORE_INDEX_TRUST", Scope::kRuntime, "interposer, `Client::FromEnv`",                                  \
    "token of an index `fanstore run` checked once, so children skip re-hashing it (internal)", "unset: hash the index")    \
  X(kLazy, "FANSTORE_LAZY", Scope::kRuntime, "interposer",                                                                  \
    "`0`: no lazy fds; every open of a file makes its memfd at once (`docs/interpose.md`)", "lazy fds")                     \
  X(kSlurmNodeName, "SLURMD_NODENAME", Scope::kRuntime, "`fanstore serve`, `wait`, `run`/`mount --daemon`, clients",        \
    "set by Slurm in a job step: what `{node}` becomes in `serve --local/--socket`, `wait`, `run`/`mount --daemon` and "    \
    "`FANSTORE_DAEMON`",                                                                                                    \
    "unset: the host name")                                                                                                 \
  X(kCwd, "FANSTORE_CWD", Scope::kRuntime, "interposer",                                                                    \
    "virtual working directory handed to exec'd children (set by the interposer, not by users)", "unset")                   \
  X(kRunBinary, "FANSTORE_RUN", Scope::kRuntime, "interposer",                                                              \
    "the `fanstore` binary, to which the interposer hands static programs (set by `fanstore run`, not by users)", "unset") \
  X(kLoaderEnv, "FANSTORE_LOADER_ENV", Scope::kRuntime, "`fanstore run`",                                                   \
    "the loader's variables (`LD_TRACE_LOADED_OBJECTS` of `ldd`, `LD_DEBUG`, ...) of a program handed to `fanstore run`, " \
    "kept from `fanstore run` itself and set again for the program (set by the interposer, not by users)", "unset")
// clang-format on

// The name of each variable as a constant: env::kImage is "FANSTORE_IMAGE". (The two row macros stay defined:
// env_tooling.hpp expands its table with them too.)
#define FANSTORE_ENV_NAME_CONSTANT(id, name, scope, readers, meaning, fallback) inline constexpr const char* id = name;
FANSTORE_ENV_VARIABLES(FANSTORE_ENV_NAME_CONSTANT)

struct Variable {
  const char* name;
  Scope scope;
  const char* readers;  // who reads it
  const char* meaning;
  const char* fallback;  // what holds when it is unset
};

// The whole table, in the order above (README.md's order of the run-time table).
#define FANSTORE_ENV_TABLE_ROW(id, name, scope, readers, meaning, fallback) \
  Variable{name, scope, readers, meaning, fallback},
inline constexpr Variable kVariables[] = {FANSTORE_ENV_VARIABLES(FANSTORE_ENV_TABLE_ROW)};

inline constexpr const char* kDefaultMount = "/fanstore";

// A byte count as the *_BYTES variables take it: decimal digits only, below 2^64. strtoull alone would take
// "-5" as 2^64 - 5 and " 7" as 7.
inline std::optional<uint64_t> ParseByteCount(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  uint64_t v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (v > (UINT64_MAX - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  return v;
}
}  // namespace fanstore::env
