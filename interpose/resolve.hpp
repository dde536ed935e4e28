// From a (dirfd, path) pair as a libc call sees it to "not ours" or an image entry (or the errno to report).
#pragma once

#include <fcntl.h>

#include <cstdint>
#include <string>

namespace fanstore::interpose {

struct Resolved {
  enum Kind { kPass, kOurs, kFail };
  Kind kind = kPass;
  int err = 0;            // kFail: the errno to report (ENOENT, ENOTDIR, ENAMETOOLONG, EIO)
  uint32_t id = 0;        // kOurs after Resolve(): the entry
  bool want_dir = false;  // the path ended in '/', '.' or '..': it must name a directory
  std::string rel;        // kOurs/kFail under the mount: normalised image-relative path
  // kPass: when the caller's path was relative to a virtual cwd or to one of our directory fds, libc
  // cannot resolve it; this is the lexically resolved absolute path to hand over instead.
  std::string rewritten;
  // kOurs/kFail: the path was /proc/self/fd/N (or /dev/fd/N, /dev/stdin...) of one of our fds, with
  // nothing after N: it names that fd's entry, and readlink of it says the entry's absolute path.
  bool fd_link = false;
  // Search permission (perm.hpp): the kernel asks it of every directory a walk passes through, from where the walk
  // starts. `search_top`: the walk started at this directory of the image (an fd of ours), so directories above it
  // are not checked; `no_search`: nothing is searched (/proc/self/fd/N names the open file itself).
  uint32_t search_top = 0xFFFFFFFFu;
  bool no_search = false;

  bool pass() const { return kind == kPass; }
  const char* PassPath(const char* path) const { return rewritten.empty() ? path : rewritten.c_str(); }
  int PassDirfd(int dirfd) const { return rewritten.empty() ? dirfd : AT_FDCWD; }
};

// Is (dirfd, path) under the mount? dirfd is AT_FDCWD for the non-*at calls. When the image holds symlinks, the
// ones on the path are followed here (the last component's too when `follow_last`, as stat and open do; not
// for lstat, readlink, O_NOFOLLOW or calls on the name itself): `rel` becomes the path they lead to, or the result
// is kPass with `rewritten` when they lead out of the image. Otherwise no image lookup: the fast pass.
Resolved Classify(int dirfd, const char* path, bool follow_last = true);

// Classify, then look the path up: kOurs with `id`, or kFail with the errno POSIX would give
// (EIO for every path under the mount when the image could not be opened; EACCES when a directory on the way
// denies the caller search permission, symlinks' ways included, as the kernel's path walk does).
Resolved Resolve(int dirfd, const char* path, bool follow_last = true);

// Looks up an already classified kOurs result in place (search permission included).
void LookUp(Resolved* r);

// The errno a call that creates a new entry at a classified kOurs path gets on a read-only file system
// (as the kernel's filename_create): EEXIST when it exists, the parent's ENOENT/ENOTDIR when the
// parent is missing or a file, EROFS otherwise (EIO when the image is broken).
int CreateErrno(const Resolved& classified);

// An AT_EMPTY_PATH call on (dirfd, "") or (dirfd, NULL): true when it names the fd itself. Then `*ours`
// tells whether the target is one of our entries (`*id`). AT_FDCWD stands for the cwd, which is ours
// when it is virtual.
bool EmptyPathTarget(int dirfd, const char* path, int flags, bool* ours, uint32_t* id);

// "/fanstore" + "/" + rel, the absolute path of an entry as programs see it.
std::string AbsoluteOf(const std::string& rel);
std::string AbsoluteOfId(uint32_t id);

}  // namespace fanstore::interpose
