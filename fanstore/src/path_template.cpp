// "{node}" expansion: this node's name (Slurm's, else the host's) substituted into per-node paths.
#include "fanstore/path_template.hpp"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>

#include "fanstore/env.hpp"

namespace fanstore {
namespace {

// Empty when `name` can be one path component, else why not.
std::string_view WhyNotAComponent(std::string_view name) {
  if (name.empty()) return "it is empty";
  if (name == "." || name == "..") return "it is a relative directory name";
  if (name.find('/') != std::string_view::npos) return "it contains '/'";
  if (name.find('\0') != std::string_view::npos) return "it contains a NUL byte";
  return {};
}

}  // namespace

Result<std::string> NodeName() {
  // An empty SLURMD_NODENAME is as good as none: outside a job step some wrappers export it empty.
  if (const char* slurm = getenv(env::kSlurmNodeName); slurm && *slurm) {
    if (auto why = WhyNotAComponent(slurm); !why.empty())
      return Status(Code::kInvalidArgument, std::string(env::kSlurmNodeName) + "='" + slurm +
                                                "' cannot name a node directory: " + std::string(why) +
                                                " (fix or unset it)");
    return std::string(slurm);
  }
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0) return Status::FromErrno(errno, "gethostname (for {node})");
  if (auto why = WhyNotAComponent(host); !why.empty())
    return Status(Code::kInvalidArgument, std::string("host name '") + host + "' cannot name a node directory: " +
                                              std::string(why) + " (set SLURMD_NODENAME, or avoid {node})");
  return std::string(host);
}

Result<std::string> ExpandNode(std::string_view path, std::string_view node) {
  if (auto why = WhyNotAComponent(node); !why.empty())
    return Status(Code::kInvalidArgument,
                  "node name '" + std::string(node) + "' cannot replace {node} in '" + std::string(path) + "': " +
                      std::string(why));
  std::string out;
  out.reserve(path.size() + node.size());
  size_t from = 0;
  for (size_t at; (at = path.find(kNodeKey, from)) != std::string_view::npos; from = at + kNodeKey.size()) {
    out.append(path.substr(from, at - from));
    out.append(node);
  }
  out.append(path.substr(from));
  return out;
}

Result<std::string> ExpandNodeTemplate(std::string_view path) {
  if (path.find(kNodeKey) == std::string_view::npos) return std::string(path);
  auto node = NodeName();
  if (!node.ok()) return node.status();
  return ExpandNode(path, *node);
}

}  // namespace fanstore
