// "{node}" in per-node paths (a daemon's socket, its staging directory): what this node is called and the
// substitution, header-only so that programs linking no fanstore code (the trainer's prefetch hint) name
// a node's daemon exactly as the front ends do (fanstore/path_template.hpp wraps these in Status).
#pragma once

#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "fanstore/env.hpp"

namespace fanstore::node_name {

inline constexpr std::string_view kKey = "{node}";

// Empty when `name` can be one path component, else why not (nodes would share a directory or escape it).
inline std::string_view WhyNotAComponent(std::string_view name) {
  if (name.empty()) return "it is empty";
  if (name == "." || name == "..") return "it is a relative directory name";
  if (name.find('/') != std::string_view::npos) return "it contains '/'";
  if (name.find('\0') != std::string_view::npos) return "it contains a NUL byte";
  return {};
}

// This node's name: Slurm's SLURMD_NODENAME (set in every task of a job, and the only thing that tells apart the
// virtual nodes of a cluster that runs several slurmd on one host; an empty one counts as unset), else the host
// name. On failure the name is empty and `error` says why and what to do.
struct Lookup {
  std::string name, error;
};
inline Lookup LookUp() {
  if (const char* slurm = std::getenv(env::kSlurmNodeName); slurm && *slurm) {
    if (auto why = WhyNotAComponent(slurm); !why.empty())
      return {"", std::string(env::kSlurmNodeName) + "='" + slurm +
                      "' cannot name a node directory: " + std::string(why) + " (fix or unset it)"};
    return {slurm, ""};
  }
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0)
    return {"", std::string("gethostname (for {node}): ") + std::strerror(errno)};
  if (auto why = WhyNotAComponent(host); !why.empty())
    return {"", std::string("host name '") + host + "' cannot name a node directory: " + std::string(why) +
                    " (set SLURMD_NODENAME, or avoid {node})"};
  return {host, ""};
}

// Replaces every "{node}" in `path` with `node` (a name WhyNotAComponent accepts).
inline std::string Substitute(std::string_view path, std::string_view node) {
  std::string out;
  out.reserve(path.size() + node.size());
  size_t from = 0;
  for (size_t at; (at = path.find(kKey, from)) != std::string_view::npos; from = at + kKey.size()) {
    out.append(path.substr(from, at - from));
    out.append(node);
  }
  out.append(path.substr(from));
  return out;
}

}  // namespace fanstore::node_name
