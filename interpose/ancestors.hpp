// The mount's ancestor directories ("/" and "/data" for a mount at /data/imagenet): which real directory
// fds name one, so that `openat(fd_of("/"), "fanstore/x")` and `fstatat(fd, "fanstore")` reach the image.
#pragma once

#include <string>
#include <string_view>

#include "mount_walk.hpp"

namespace fanstore::interpose::ancestors {

// Splits the mount prefix (g_mount) into components. Called once at start-up, after g_mount is set.
void Init();

// Number of components of the mount: 1 for "/fanstore", 2 for "/data/imagenet", 0 for "/".
int MountDepth();
// The ancestor at `depth` (0 = "/", MountDepth() - 1 = the mount's parent), as a prefix of the mount.
std::string_view PathAt(int depth);
// The mount's component just below the ancestor at `depth` ("imagenet" below "/data").
std::string_view ChildName(int depth);

// Depth of (dirfd, path) when it names a proper ancestor of the mount (as libc would resolve it), else -1.
int DepthOf(int dirfd, const char* path);

// After libc opened (dirfd, path) as `fd` for the program (open/openat/opendir): marks fd in the fd table
// when it names an ancestor of the mount, and clears any stale tracking of the number otherwise.
void NoteOpened(int fd, int dirfd, const char* path);

// The absolute directory a relative path against the real `dirfd` starts from, when that is known
// cheaply: an ancestor fd. Empty when unknown (the kernel resolves it; nothing of ours is reachable
// unless the path climbs with ".." -- then /proc/self/fd is asked).
std::string BaseOfDirfd(int dirfd, const char* path);

// Could a walk (nftw, ftw, fts) of `path` reach the mount? Paths under it or above it, and relative
// paths while the cwd is virtual or near the mount, or that climb with "..". Others keep glibc's walk.
bool WalkReaches(const char* path);
// Could an absolute glob pattern match a path at or below the mount ("/data/*/train" for /data/imagenet)?
bool PatternReaches(const char* pattern);

}  // namespace fanstore::interpose::ancestors
