// The lexical ancestor-of-the-mount walk (see mount_walk.hpp).
#include "mount_walk.hpp"

namespace fanstore::interpose {
namespace {
constexpr int kMaxDepth = 255;
}  // namespace

// See mount_walk.hpp.
int SplitComponents(std::string_view path, std::string_view* out, int cap) {
  int n = 0;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t j = i;
    while (j < path.size() && path[j] != '/') ++j;
    if (j > i) {
      if (n == cap) return -1;
      out[n++] = path.substr(i, j - i);
    }
    i = j;
  }
  return n;
}

MountWalk WalkPath(std::string_view mount, std::string_view base, std::string_view path) {
  std::string_view mc[kMaxDepth];
  int md = SplitComponents(mount, mc, kMaxDepth);
  MountWalk w;
  if (md < 0) return w;
  // State: the first `matched` components equal the mount's; `extra` more have diverged from it.
  int matched = 0, extra = 0;
  auto step = [&](std::string_view c) {
    if (c.empty() || c == ".") return;
    if (c == "..") {
      if (extra > 0) {
        --extra;
      } else if (matched > 0) {
        --matched;
      }
      return;
    }
    if (extra == 0 && matched < md && c == mc[matched]) {
      ++matched;
    } else {
      ++extra;
    }
    if (extra == 0 && matched == md) w.enters = true;
  };
  auto walk = [&](std::string_view p) {
    size_t i = 0;
    while (i <= p.size()) {
      size_t j = p.find('/', i);
      if (j == std::string_view::npos) j = p.size();
      step(p.substr(i, j - i));
      i = j + 1;
    }
  };
  if (path.empty() || path[0] != '/') walk(base);
  walk(path);
  if (extra == 0 && matched < md) w.depth = matched;
  return w;
}

}  // namespace fanstore::interpose
