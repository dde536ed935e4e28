// Per-node path templates: "{node}" in `fanstore serve --local/--socket`, `fanstore wait` and `fanstore run --daemon`.
#pragma once

#include <string>
#include <string_view>

#include "fanstore/status.hpp"

namespace fanstore {

inline constexpr std::string_view kNodeKey = "{node}";

// The name of the node this process runs on: Slurm's SLURMD_NODENAME (set in every task of a job, and the
// only thing that tells apart the virtual nodes of a cluster that runs several slurmd on one host), else the
// host name. A name that could not be one path component (see ExpandNode) is kInvalidArgument.
Result<std::string> NodeName();

// Replaces every "{node}" in `path` with `node`. Pure. A name that is empty, "." or "..", or holds '/' or a
// NUL would make nodes share a directory or escape it: kInvalidArgument, never a silently different path.
Result<std::string> ExpandNode(std::string_view path, std::string_view node);

// What the front ends call: `path` itself when it has no "{node}" (no look-up at all), else
// ExpandNode(path, NodeName()).
Result<std::string> ExpandNodeTemplate(std::string_view path);

}  // namespace fanstore
