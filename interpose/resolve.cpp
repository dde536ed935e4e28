// Path resolution for the wrappers: the cheap "not ours" checks first, then fanstore::ClassifyPath and Client::Lookup.
#include "resolve.hpp"

#include <string.h>
#include <unistd.h>

#include "ancestors.hpp"
#include "cwd.hpp"
#include "fanstore/path.hpp"
#include "fanstore/status.hpp"
#include "fd_table.hpp"
#include "mirror.hpp"
#include "perm.hpp"
#include "state.hpp"

namespace fanstore::interpose {
namespace {

// A relative path with a ".." component can climb from anywhere into the mount.
bool HasDotDot(const char* p) {
  for (const char* s = strstr(p, ".."); s != nullptr; s = strstr(s + 1, "..")) {
    bool start = (s == p || s[-1] == '/');
    bool end = (s[2] == '\0' || s[2] == '/');
    if (start && end) return true;
  }
  return false;
}

bool EndsAsDirectory(const char* p) {
  size_t n = strlen(p);
  if (n == 0) return false;
  if (p[n - 1] == '/') return true;
  // "x/." and "x/.." (and "." / "..") name directories whatever x is.
  if (p[n - 1] == '.' && (n == 1 || p[n - 2] == '/')) return true;
  if (n >= 2 && p[n - 1] == '.' && p[n - 2] == '.' && (n == 2 || p[n - 3] == '/')) return true;
  return false;
}

}  // namespace

std::string AbsoluteOf(const std::string& rel) {
  std::string out(g_mount, g_mount_len);
  if (!rel.empty()) {
    if (out != "/") out.push_back('/');
    out += rel;
  }
  return out;
}

std::string AbsoluteOfId(uint32_t id) { return AbsoluteOf(std::string(g_client->image().Get(id).path)); }

namespace {

// /proc/self/fd/N[/rest], /proc/thread-self/fd/N, /proc/<our pid>/fd/N, /dev/fd/N, /dev/stdin|stdout|stderr:
// the kernel follows such a link to the file behind fd N. When N is one of ours, that file is an image
// entry: *out = its absolute path + rest. False otherwise (no allocation on that path).
bool MapFdLink(const char* path, std::string* out, bool* bare, uint32_t* fd_id) {
  const char* num = nullptr;
  int fixed = -1;
  if (strncmp(path, "/proc/", 6) == 0) {
    const char* p = path + 6;
    if (strncmp(p, "self/fd/", 8) == 0) {
      num = p + 8;
    } else if (strncmp(p, "thread-self/fd/", 15) == 0) {
      num = p + 15;
    } else if (*p >= '0' && *p <= '9') {
      long pid = 0;
      for (; *p >= '0' && *p <= '9' && pid < (1L << 31); ++p) pid = pid * 10 + (*p - '0');
      if (pid != getpid() || strncmp(p, "/fd/", 4) != 0) return false;
      num = p + 4;
    } else {
      return false;
    }
  } else if (strncmp(path, "/dev/", 5) == 0) {
    const char* p = path + 5;
    if (strncmp(p, "fd/", 3) == 0) {
      num = p + 3;
    } else if (strcmp(p, "stdin") == 0) {
      fixed = 0;
    } else if (strcmp(p, "stdout") == 0) {
      fixed = 1;
    } else if (strcmp(p, "stderr") == 0) {
      fixed = 2;
    } else {
      return false;
    }
  } else {
    return false;
  }
  int fd = fixed;
  const char* rest = "";
  if (num != nullptr) {
    if (*num < '0' || *num > '9') return false;
    fd = 0;
    for (; *num >= '0' && *num <= '9'; ++num) {
      fd = fd * 10 + (*num - '0');
      if (fd >= FdTable::kCapacity) return false;
    }
    if (*num != '\0' && *num != '/') return false;
    rest = num;
  }
  uint32_t id;
  if (!FdTable::Lookup(fd, &id) || g_client == nullptr) return false;
  *out = AbsoluteOfId(id) + rest;
  *bare = *rest == '\0';
  *fd_id = id;
  return true;
}

}  // namespace

namespace {

// Client::Resolve's question before it follows a symlink: may the caller search every directory leading to it?
bool MayFollow(void* ctx, uint32_t link) {
  perm::Caller who;
  const uint32_t parent = g_client->image().Get(link).parent;
  return perm::SearchUp(parent, who, *static_cast<const uint32_t*>(ctx)) == 0;
}

// Follows the image's symlinks on a classified path (kOurs): rel becomes link-free, or the path leaves the image.
void FollowLinks(Resolved* r, bool follow_last) {
  std::string missing;
  // "link/" names what it points at
  auto t = g_client->Resolve(r->rel, follow_last || r->want_dir, &missing, r->no_search ? nullptr : MayFollow,
                             &r->search_top);
  if (!t.ok()) {
    Code c = t.status().code();
    if (c == Code::kNotFound || c == Code::kNotDirectory) {
      r->rel = std::move(missing);  // LookUp says ENOENT/ENOTDIR; a create creates this name (a dangling target)
    } else {                        // ELOOP, ENAMETOOLONG, EIO
      r->kind = Resolved::kFail;
      r->err = ToErrno(t.status());
    }
    return;
  }
  if (!t->outside.empty()) {
    r->kind = Resolved::kPass;
    r->rewritten = std::move(t->outside);
    r->rel.clear();
    return;
  }
  r->rel = std::string(g_client->image().Get(t->id).path);
}

Resolved ClassifyLexically(int dirfd, const char* path);

// A program exec'd from the image runs from its copy in the mirror (mirror.hpp), and the image's libraries are
// loaded from theirs: /proc/self/exe, dladdr and $ORIGIN name the mirror. A path under it is the same path under the
// mount, so such a program finds the files next to it (a Python or JDK finds its library tree so). *out: that path.
bool Unmirror(const char* path, std::string* out) {
  return mirror::ToMount(path, std::string_view(g_mirror, g_mirror_len), std::string_view(g_mount, g_mount_len), out);
}

}  // namespace

Resolved Classify(int dirfd, const char* path, bool follow_last) {
  Resolved r = ClassifyLexically(dirfd, path);
  if (r.kind == Resolved::kOurs && g_has_links && Ready()) FollowLinks(&r, follow_last);
  return r;
}

namespace {

Resolved ClassifyLexically(int dirfd, const char* path) {
  Resolved r;
  if (path == nullptr || path[0] == '\0') return r;  // libc reports EFAULT/ENOENT (AT_EMPTY_PATH: caller's job)
  std::string_view mount(g_mount, g_mount_len);
  Classified c;
  bool virtual_base = false;
  std::string base;
  std::string mapped;
  uint32_t fd_id = 0;
  if (path[0] == '/' && (path[1] == 'p' || path[1] == 'd') && FdTable::HighWater() != 0 &&
      MapFdLink(path, &mapped, &r.fd_link, &fd_id)) {
    path = mapped.c_str();
    // The kernel jumps to the open file without a walk: below it, the walk starts there.
    r.no_search = r.fd_link;
    r.search_top = fd_id;
  }
  std::string unmirrored;
  if (path[0] == '/' && Unmirror(path, &unmirrored)) path = unmirrored.c_str();
  if (path[0] == '/') {
    c = ClassifyPath(path, mount, mount);  // allocation-free when not under the mount
    // "/fanstore/../etc" climbs out through a directory the kernel may not have: resolve it lexically.
    if (c.cls == PathClass::kNotOurs && strncmp(path, g_mount, g_mount_len) == 0 &&
        (path[g_mount_len] == '/' || path[g_mount_len] == '\0'))
      r.rewritten = NormalizeAbsolute(path);
  } else {
    uint32_t dir_raw = dirfd == AT_FDCWD ? 0 : FdTable::Raw(dirfd);
    if (dirfd != AT_FDCWD && FdTable::IsOurs(dir_raw)) {
      if (g_client == nullptr) return r;
      r.search_top = FdTable::IdOf(dir_raw);
      base = AbsoluteOfId(r.search_top);
      virtual_base = true;
    } else if (dirfd != AT_FDCWD) {
      // A real directory fd: the kernel resolves the path, unless the fd is an ancestor of the mount
      // (rsync: open("/", O_PATH) then fstatat(fd, "fanstore")) or the path climbs with "..".
      if (dir_raw == 0 && !HasDotDot(path)) return r;
      base = ancestors::BaseOfDirfd(dirfd, path);
      if (base.empty()) return r;
    } else if (cwd::HasVirtual()) {
      base = cwd::Base();
      virtual_base = true;
    } else {
      if (!cwd::RealCwdNearMount() && !HasDotDot(path)) return r;  // the common case: one flag, one scan
      base = cwd::Base();
    }
    c = ClassifyPath(path, mount, base);
    // libc cannot resolve a path against a virtual base, nor one that passes through a mount point that
    // may not exist on disk ("fanstore/../etc" from "/"): hand it the lexically resolved absolute path.
    if (c.cls == PathClass::kNotOurs && (virtual_base || WalkPath(mount, base, path).enters)) {
      std::string joined = base;
      joined.push_back('/');
      joined += path;
      r.rewritten = NormalizeAbsolute(joined);
    }
  }
  switch (c.cls) {
    case PathClass::kNotOurs: return r;
    case PathClass::kTooLong:
      r.kind = Resolved::kFail;
      r.err = ENAMETOOLONG;
      return r;
    case PathClass::kOurs: break;
  }
  r.kind = Resolved::kOurs;
  r.rel = std::move(c.rel);
  r.want_dir = EndsAsDirectory(path);
  return r;
}

}  // namespace

namespace {

// EACCES when the caller may not search a directory the kernel's walk passes through to reach entry `id` (the
// directories above it, or only `search_top` when the walk starts at the entry itself). 0 otherwise.
int SearchErr(const Resolved& r, uint32_t id) {
  if (r.no_search || id == kRootId) return 0;
  perm::Caller who;
  if (id == r.search_top) return perm::CheckEntry(g_client->image().Get(id), perm::kExec, who);  // "." of an fd
  return perm::SearchUp(g_client->image().Get(id).parent, who, r.search_top);
}

// A miss (ENOENT, ENOTDIR): the kernel's walk stopped at the deepest entry that exists, after searching every
// directory on the way to it (and in it, when it is a directory). EACCES when one of them denies the caller.
int MissSearchErr(const Resolved& r) {
  if (r.no_search) return 0;
  const Image& img = g_client->image();
  std::string_view rel(r.rel);
  for (size_t cut = rel.rfind('/');; cut = rel.rfind('/', cut - 1)) {
    uint32_t found = kRootId;
    if (cut != std::string_view::npos && cut > 0) {
      auto p = img.Lookup(rel.substr(0, cut));
      if (!p.ok()) continue;
      found = *p;
    }
    const Entry e = img.Get(found);
    perm::Caller who;
    return perm::SearchUp(e.is_dir() ? found : e.parent, who, r.search_top);
  }
}

}  // namespace

void LookUp(Resolved* r) {
  if (r->kind != Resolved::kOurs) return;
  if (!Ready()) {
    r->kind = Resolved::kFail;
    r->err = EIO;
    return;
  }
  auto id = g_client->Lookup(r->rel);
  if (!id.ok()) {
    r->kind = Resolved::kFail;
    r->err = ToErrno(id.status());
    if ((r->err == ENOENT || r->err == ENOTDIR) && MissSearchErr(*r) != 0) r->err = EACCES;
    return;
  }
  if (int err = SearchErr(*r, *id); err != 0) {
    r->kind = Resolved::kFail;
    r->err = err;
    return;
  }
  r->id = *id;
  if (r->want_dir && !g_client->image().Get(r->id).is_dir()) {
    r->kind = Resolved::kFail;
    r->err = ENOTDIR;
  }
}

int CreateErrno(const Resolved& classified) {
  Resolved r = classified;
  r.want_dir = false;
  LookUp(&r);
  if (r.kind == Resolved::kOurs) return EEXIST;
  if (r.err != ENOENT) return r.err;
  // Missing: creating it needs the parent directory, whose absence the kernel reports first.
  if (!classified.rel.empty()) {
    Resolved parent = classified;
    size_t slash = parent.rel.rfind('/');
    parent.rel.resize(slash == std::string::npos ? 0 : slash);
    parent.want_dir = true;
    LookUp(&parent);
    if (parent.kind == Resolved::kFail) return parent.err;
  }
  return EROFS;
}

bool EmptyPathTarget(int dirfd, const char* path, int flags, bool* ours, uint32_t* id) {
  if (!(flags & AT_EMPTY_PATH) || (path != nullptr && path[0] != '\0')) return false;
  *ours = false;
  if (dirfd == AT_FDCWD) {
    if (!cwd::HasVirtual()) return true;
    Resolved r = Resolve(AT_FDCWD, ".");
    if (r.kind != Resolved::kOurs) return true;
    *ours = true;
    *id = r.id;
    return true;
  }
  *ours = FdTable::Lookup(dirfd, id);
  return true;
}

Resolved Resolve(int dirfd, const char* path, bool follow_last) {
  Resolved r = Classify(dirfd, path, follow_last);
  LookUp(&r);
  return r;
}

}  // namespace fanstore::interpose
