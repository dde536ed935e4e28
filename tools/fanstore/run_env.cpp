// PrepareRunEnvironment: the index trust token and the node chunk cache for `fanstore run`'s children.
#include "run_env.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "fanstore/env.hpp"
#include "fanstore/node_cache.hpp"

namespace fanstore::cli {

namespace {
// FANSTORE_NODE_CACHE=off (or 0): no node chunk cache, and FANSTORE_NODE_CACHE_BYTES is not read.
bool NodeCacheOff() {
  const char* root = getenv(env::kNodeCache);
  return root && (std::string(root) == "off" || std::string(root) == "0");
}
}  // namespace

std::string CheckRunVariables() {
  if (const char* c = getenv(env::kCacheBytes); c && *c && !env::ParseByteCount(c))
    return std::string(env::kCacheBytes) + "='" + c +
           "' is not a byte count: give a number of bytes (0 disables the per-process cache) or unset it";
  if (const char* b = getenv(env::kNodeCacheBytes); b && *b && !NodeCacheOff()) {
    auto v = env::ParseByteCount(b);
    if (!v || *v == 0)
      return std::string(env::kNodeCacheBytes) + "='" + b + "' is not a byte count above 0: give a number of bytes, " +
             "or set " + env::kNodeCache + "=off to run without the node chunk cache";
  }
  return {};
}

void PrepareRunEnvironment(const Image& img, bool copy_index) {
  setenv(env::kIndexTrust, img.TrustToken().c_str(), 1);
  unsetenv(env::kNodeCacheDir);
  NodeCacheOptions o;
  if (NodeCacheOff()) return;
  if (const char* root = getenv(env::kNodeCache); root && *root) o.root = root;
  // (`fanstore run` refused a value this cannot parse before: CheckRunVariables.)
  if (auto v = env::ParseByteCount(getenv(env::kNodeCacheBytes)); v && *v > 0) o.budget = *v;
  auto dir = JoinNodeCache(img, o, getpid());
  if (!dir.ok()) {
    std::fprintf(stderr, "fanstore run: warning: no node-wide cache (%s); each process decodes for itself\n",
                 dir.status().ToString().c_str());
    return;
  }
  setenv(env::kNodeCacheDir, dir->c_str(), 1);
  if (!copy_index) return;
  // The children map this copy of the index (fanstore::Client finds it there), not the image's own.
  auto token = KeepIndexCopy(img, *dir);
  if (token.ok()) setenv(env::kIndexTrust, token->c_str(), 1);
  else
    std::fprintf(stderr,
                 "fanstore run: warning: no private copy of the index (%s); do not overwrite %s in place while this "
                 "runs\n",
                 token.status().ToString().c_str(), img.IndexFile().c_str());
}

}  // namespace fanstore::cli
