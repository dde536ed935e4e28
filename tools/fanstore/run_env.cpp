// PrepareRunEnvironment: the index trust token and the node chunk cache for `fanstore run`'s children.
#include "run_env.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "fanstore/env.hpp"
#include "fanstore/node_cache.hpp"

namespace fanstore::cli {

void PrepareRunEnvironment(const Image& img, bool copy_index) {
  setenv(env::kIndexTrust, img.TrustToken().c_str(), 1);
  unsetenv(env::kNodeCacheDir);
  NodeCacheOptions o;
  if (const char* root = getenv(env::kNodeCache); root && *root) {
    if (std::string(root) == "off" || std::string(root) == "0") return;
    o.root = root;
  }
  if (const char* b = getenv(env::kNodeCacheBytes); b && *b) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(b, &end, 10);
    if (end == b || *end != '\0' || v == 0) {
      std::fprintf(stderr, "fanstore run: warning: %s='%s' is not a byte count; using the default budget\n",
                   env::kNodeCacheBytes, b);
    } else {
      o.budget = v;
    }
  }
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
