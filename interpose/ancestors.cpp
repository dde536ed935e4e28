// Ancestors of the mount: the lexical walk that recognises them, and the fd-table marks of real directory fds naming
// one.
#include "ancestors.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cwd.hpp"
#include "fd_identity.hpp"
#include "fd_table.hpp"
#include "mount_walk.hpp"
#include "real.hpp"
#include "state.hpp"

namespace fanstore::interpose::ancestors {
namespace {

// Component k of the mount is g_mount[g_off[k], g_off[k] + g_len[k]).
constexpr int kMaxDepth = FdTable::kMaxAncestorDepth + 1;
int g_depth = 0;
uint16_t g_off[kMaxDepth];
uint16_t g_len[kMaxDepth];

bool HasDotDot(std::string_view p) {
  for (size_t i = p.find(".."); i != std::string_view::npos; i = p.find("..", i + 1)) {
    bool start = i == 0 || p[i - 1] == '/';
    bool end = i + 2 == p.size() || p[i + 2] == '/';
    if (start && end) return true;
  }
  return false;
}

}  // namespace

void Init() {
  std::string_view m(g_mount, g_mount_len);
  std::string_view comps[kMaxDepth];
  int n = SplitComponents(m, comps, kMaxDepth);
  if (n < 0) n = 0;  // deeper than the fd table can mark: no ancestor is ever recognised
  for (int k = 0; k < n; ++k) {
    g_off[k] = static_cast<uint16_t>(comps[k].data() - g_mount);
    g_len[k] = static_cast<uint16_t>(comps[k].size());
  }
  g_depth = n;
}

int MountDepth() { return g_depth; }

std::string_view PathAt(int depth) {
  if (depth <= 0) return "/";
  return std::string_view(g_mount, g_off[depth - 1] + g_len[depth - 1]);
}

std::string_view ChildName(int depth) {
  if (depth < 0 || depth >= g_depth) return {};
  return std::string_view(g_mount + g_off[depth], g_len[depth]);
}

int DepthOf(int dirfd, const char* path) {
  if (g_depth == 0 || path == nullptr) return -1;
  std::string_view p(path);
  std::string base;
  if (p.empty() || p[0] != '/') {
    if (dirfd == AT_FDCWD) {
      // From a cwd that is neither an ancestor nor inside the mount, only ".." can climb to an ancestor.
      if (!cwd::RealCwdNearMount() && !HasDotDot(p)) return -1;
      ReentrancyGuard guard;
      try {
        base = cwd::Base();
      } catch (...) {
        return -1;
      }
    } else {
      uint32_t raw = FdTable::Raw(dirfd);
      if (FdTable::IsOurs(raw) || (raw == 0 && !HasDotDot(p))) return -1;
      ReentrancyGuard guard;
      try {
        base = BaseOfDirfd(dirfd, path);
      } catch (...) {
        return -1;
      }
      if (base.empty()) return -1;
    }
  } else if (p.size() > g_mount_len + 2 && !HasDotDot(p)) {
    return -1;  // longer than the mount and no "..": cannot name an ancestor
  }
  return WalkPath(std::string_view(g_mount, g_mount_len), base, p).depth;
}

void NoteOpened(int fd, int dirfd, const char* path) {
  if (fd < 0) return;
  // An fd number libc hands out is not ours any more, whatever it was (closed behind our back).
  fd_identity::Reused(fd);
  int depth = DepthOf(dirfd, path);
  if (depth >= 0) FdTable::MarkAncestor(fd, depth);
}

std::string BaseOfDirfd(int dirfd, const char* path) {
  uint32_t raw = FdTable::Raw(dirfd);
  if (FdTable::IsAncestor(raw)) return std::string(PathAt(FdTable::AncestorDepth(raw)));
  if (path == nullptr || !HasDotDot(path) || g_depth == 0) return {};
  // A real directory fd and a path that climbs: only the kernel knows where the fd is.
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
  char buf[PATH_MAX];
  ssize_t n = FS_REAL(readlink, link, buf, sizeof buf - 1);
  if (n <= 0 || buf[0] != '/') return {};
  return std::string(buf, static_cast<size_t>(n));
}

// Could a walk of `path` reach the mount? Absolute paths under the mount prefix or above it (the mount's
// ancestors: a walk of "/data" enters "/data/imagenet"); relative paths while the cwd is virtual or near the
// mount, or that climb with "..". Everything else keeps glibc's own walk.
bool WalkReaches(const char* path) {
  if (path == nullptr || !Active()) return false;
  if (path[0] == '/') {
    if (strncmp(path, g_mount, g_mount_len) == 0 &&
        (g_mount_len == 1 || path[g_mount_len] == '/' || path[g_mount_len] == '\0'))
      return true;
    return DepthOf(AT_FDCWD, path) >= 0;
  }
  if (cwd::HasVirtual() || cwd::RealCwdNearMount()) return true;
  for (const char* s = strstr(path, ".."); s != nullptr; s = strstr(s + 1, ".."))
    if ((s == path || s[-1] == '/') && (s[2] == '\0' || s[2] == '/')) return true;
  return false;
}

// Could an absolute glob pattern match a path at or below the mount ("/data/*/train" for a mount at
// /data/imagenet)? Its first components must match the mount's, as glob would match them.
bool PatternReaches(const char* pattern) {
  if (pattern == nullptr || pattern[0] != '/' || !Active()) return false;
  const int depth = MountDepth();
  const char* p = pattern;
  for (int k = 0; k < depth; ++k) {
    while (*p == '/') ++p;
    if (*p == '\0') return false;  // ends above the mount: the real listing is complete there
    const char* end = strchr(p, '/');
    size_t n = end ? static_cast<size_t>(end - p) : strlen(p);
    std::string_view mine = ChildName(k);
    char pat[NAME_MAX + 1], name[NAME_MAX + 1];
    if (n > NAME_MAX || mine.size() > NAME_MAX) return false;
    memcpy(pat, p, n);
    pat[n] = '\0';
    memcpy(name, mine.data(), mine.size());
    name[mine.size()] = '\0';
    if (fnmatch(pat, name, FNM_PERIOD) != 0) return false;
    p += n;
  }
  return true;
}

}  // namespace fanstore::interpose::ancestors
