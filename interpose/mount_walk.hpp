// The lexical walk that tells whether a path names an ancestor of the mount, or passes through the mount.
// Pure (no file system, no allocation): unit-tested in tests/interpose/mount_walk_test.cpp.
#pragma once

#include <string_view>

namespace fanstore::interpose {

// Splits an absolute path into its component views (at most `cap`); -1 when there are more.
int SplitComponents(std::string_view path, std::string_view* out, int cap);

struct MountWalk {
  int depth = -1;       // >= 0: the result is the mount's proper ancestor at this depth ("/" = 0)
  bool enters = false;  // some prefix of the walk was the mount itself (the path passes through it)
};
// Walks `base` (absolute, or empty) joined with `path` (an absolute `path` ignores `base`) component by
// component as the kernel would, but lexically: "." is skipped, ".." goes up (never above "/"), symlinks are
// not followed. `mount` is absolute and normalised; mounts deeper than 255 components are never matched.
MountWalk WalkPath(std::string_view mount, std::string_view base, std::string_view path);

}  // namespace fanstore::interpose
