// fts_open/fts_read/fts_children/fts_set/fts_close (and the fts64_ names): glibc's fts reads directories
// and stats entries with internal calls no wrapper sees, so a walk that reaches the mount (a root under it
// or above it) is done here, on the wrapped opendir/readdir/stat/lstat, with glibc's semantics. Other walks
// keep glibc's fts. Ours never changes directory: fts_accpath is fts_path, as with FTS_NOCHDIR.
#include <dirent.h>
#include <errno.h>
#include <fts.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <atomic>
#include <mutex>
#include <new>
#include <unordered_set>

#include "ancestors.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

static_assert(sizeof(FTSENT) == sizeof(FTSENT64) && sizeof(FTS) == sizeof(FTS64), "fts64 shares fts's layout");
static_assert(sizeof(struct stat) == sizeof(struct stat64), "stat64 shares stat's layout");

namespace {

using Compar = int (*)(const FTSENT**, const FTSENT**);

// One entry: our bookkeeping, then the FTSENT the caller sees (last: fts_name runs past its end).
struct Node {
  FTSENT* children;  // built children of a directory (linked by fts_link), or null
  bool names_only;   // children were built by fts_children(FTS_NAMEONLY): no stat data
  struct stat st;
  FTSENT ent;
};
Node* NodeOf(FTSENT* e) { return reinterpret_cast<Node*>(reinterpret_cast<char*>(e) - offsetof(Node, ent)); }

struct Walk {
  FTS pub;  // what the caller may read (fts_cur, fts_path, fts_options)
  FTSENT* roots = nullptr;
  FTSENT* parent = nullptr;  // the dummy parent of the roots (level -1)
  FTSENT* cur = nullptr;     // null before the first fts_read
  Compar compar = nullptr;
  dev_t root_dev = 0;
  bool done = false;
};

std::mutex g_mu;
std::unordered_set<void*>* g_walks = nullptr;  // leaked on purpose, like the DIR registry
std::atomic<int> g_live{0};

Walk* Find(void* p) {
  if (p == nullptr || g_live.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  return g_walks != nullptr && g_walks->count(p) ? static_cast<Walk*>(p) : nullptr;
}

FTSENT* NewEntry(const char* name, size_t namelen, const FTSENT* parent, bool nostat) {
  size_t parent_len = parent && parent->fts_level >= FTS_ROOTLEVEL ? parent->fts_pathlen : 0;
  bool slash = parent_len > 0 && parent->fts_path[parent_len - 1] != '/';
  size_t pathlen = parent_len + (slash ? 1 : 0) + namelen;
  if (pathlen > USHRT_MAX || namelen > USHRT_MAX) {
    errno = ENAMETOOLONG;
    return nullptr;
  }
  auto* n = static_cast<Node*>(calloc(1, sizeof(Node) + namelen + 1));
  char* path = static_cast<char*>(malloc(pathlen + 1));
  if (n == nullptr || path == nullptr) {
    free(n);
    free(path);
    errno = ENOMEM;
    return nullptr;
  }
  if (parent_len) memcpy(path, parent->fts_path, parent_len);
  if (slash) path[parent_len] = '/';
  memcpy(path + pathlen - namelen, name, namelen);
  path[pathlen] = '\0';
  FTSENT* e = &n->ent;
  memcpy(e->fts_name, name, namelen);
  e->fts_name[namelen] = '\0';
  e->fts_namelen = static_cast<unsigned short>(namelen);
  e->fts_path = path;
  e->fts_accpath = path;  // no chdir: the full path is the access path
  e->fts_pathlen = static_cast<unsigned short>(pathlen);
  e->fts_parent = const_cast<FTSENT*>(parent);
  e->fts_level = parent ? static_cast<short>(parent->fts_level + 1) : FTS_ROOTLEVEL;
  e->fts_statp = nostat ? nullptr : &n->st;
  e->fts_instr = FTS_NOINSTR;
  e->fts_symfd = -1;
  return e;
}

void FreeList(FTSENT* e);
void FreeEntry(FTSENT* e) {
  Node* n = NodeOf(e);
  FreeList(n->children);
  free(e->fts_path);
  free(n);
}
void FreeList(FTSENT* e) {
  while (e != nullptr) {
    FTSENT* next = e->fts_link;
    FreeEntry(e);
    e = next;
  }
}

// fts_info for e from stat or lstat (glibc's fts_stat): FTS_D/F/SL/SLNONE/DEFAULT/NS/DOT/DC.
unsigned short StatInfo(const Walk& w, FTSENT* e, bool follow) {
  struct stat* st = &NodeOf(e)->st;  // with FTS_NOSTAT the caller sees no stat buffer, as with glibc
  int saved = errno;
  if ((w.pub.fts_options & FTS_LOGICAL) || follow) {
    if (stat(e->fts_accpath, st) != 0) {
      if (errno == ENOENT && lstat(e->fts_accpath, st) == 0) {
        errno = saved;
        e->fts_errno = 0;
        return FTS_SLNONE;
      }
      e->fts_errno = errno;
      memset(st, 0, sizeof *st);
      errno = saved;
      return FTS_NS;
    }
  } else if (lstat(e->fts_accpath, st) != 0) {
    e->fts_errno = errno;
    memset(st, 0, sizeof *st);
    errno = saved;
    return FTS_NS;
  }
  errno = saved;
  e->fts_dev = st->st_dev;
  e->fts_ino = st->st_ino;
  e->fts_nlink = st->st_nlink;
  if (S_ISDIR(st->st_mode)) {
    if (e->fts_level > FTS_ROOTLEVEL && (strcmp(e->fts_name, ".") == 0 || strcmp(e->fts_name, "..") == 0))
      return FTS_DOT;
    for (FTSENT* a = e->fts_parent; a != nullptr && a->fts_level >= FTS_ROOTLEVEL; a = a->fts_parent) {
      if (a->fts_ino == e->fts_ino && a->fts_dev == e->fts_dev) {
        e->fts_cycle = a;
        return FTS_DC;
      }
    }
    return FTS_D;
  }
  if (S_ISLNK(st->st_mode)) return FTS_SL;
  if (S_ISREG(st->st_mode)) return FTS_F;
  return FTS_DEFAULT;
}

// Sorts a list with the caller's compar (glibc sorts roots and each directory's entries alike).
FTSENT* Sort(const Walk& w, FTSENT* head) {
  if (w.compar == nullptr || head == nullptr || head->fts_link == nullptr) return head;
  size_t n = 0;
  for (FTSENT* e = head; e; e = e->fts_link) ++n;
  auto** a = static_cast<FTSENT**>(malloc(n * sizeof(FTSENT*)));
  if (a == nullptr) return head;  // unsorted rather than lost
  n = 0;
  for (FTSENT* e = head; e; e = e->fts_link) a[n++] = e;
  qsort(a, n, sizeof *a, reinterpret_cast<int (*)(const void*, const void*)>(w.compar));
  for (size_t i = 0; i + 1 < n; ++i) a[i]->fts_link = a[i + 1];
  a[n - 1]->fts_link = nullptr;
  head = a[0];
  free(a);
  return head;
}

// Reads directory `dir` into a list of entries (glibc's fts_build). `names_only`: no stat. Returns the
// list, or null with dir's fts_info set: FTS_DNR (unreadable, fts_errno), or FTS_DP for an empty one
// when `for_read`.
FTSENT* Build(Walk& w, FTSENT* dir, bool names_only, bool for_read) {
  DIR* d = opendir(dir->fts_accpath);
  if (d == nullptr) {
    if (for_read) {
      dir->fts_info = FTS_DNR;
      dir->fts_errno = errno;
    }
    return nullptr;
  }
  const bool nostat = names_only || (w.pub.fts_options & FTS_NOSTAT);
  FTSENT* head = nullptr;
  FTSENT** tail = &head;
  int saved = errno;
  while (struct dirent64* de = readdir64(d)) {
    if (!(w.pub.fts_options & FTS_SEEDOT) && (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)) continue;
    FTSENT* e = NewEntry(de->d_name, strlen(de->d_name), dir, (w.pub.fts_options & FTS_NOSTAT) != 0);
    if (e == nullptr) {
      int err = errno;
      FreeList(head);
      closedir(d);
      dir->fts_info = FTS_ERR;
      dir->fts_errno = err;
      errno = err;
      w.done = true;  // glibc sets FTS_STOP on an allocation failure
      return nullptr;
    }
    // FTS_NOSTAT (physical walks only, as glibc) still needs to know directories: stat those readdir
    // cannot rule out.
    if (names_only || (nostat && (w.pub.fts_options & FTS_PHYSICAL) && !(w.pub.fts_options & FTS_LOGICAL) &&
                       de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)) {
      e->fts_info = FTS_NSOK;
    } else {
      e->fts_info = StatInfo(w, e, false);
    }
    *tail = e;
    tail = &e->fts_link;
  }
  closedir(d);
  errno = saved;
  if (head == nullptr && for_read) dir->fts_info = FTS_DP;
  return Sort(w, head);
}

FTS* Open(char* const* argv, int options, Compar compar) {
  if (options & ~FTS_OPTIONMASK) {
    errno = EINVAL;
    return nullptr;
  }
  auto* w = new (std::nothrow) Walk;
  if (w == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  memset(&w->pub, 0, sizeof w->pub);
  if (options & FTS_LOGICAL) options |= FTS_NOCHDIR;
  w->pub.fts_options = options;
  w->pub.fts_compar = reinterpret_cast<int (*)(const void*, const void*)>(compar);
  w->compar = compar;
  w->parent = NewEntry("", 0, nullptr, false);
  if (w->parent == nullptr) {
    delete w;
    return nullptr;
  }
  w->parent->fts_level = FTS_ROOTPARENTLEVEL;
  FTSENT** tail = &w->roots;
  for (; argv != nullptr && *argv != nullptr; ++argv) {
    size_t len = strlen(*argv);
    if (len == 0) {
      FreeList(w->roots);
      FreeEntry(w->parent);
      delete w;
      errno = ENOENT;
      return nullptr;
    }
    FTSENT* e = NewEntry(*argv, len, w->parent, (options & FTS_NOSTAT) != 0);
    if (e == nullptr) {
      int err = errno;
      FreeList(w->roots);
      FreeEntry(w->parent);
      delete w;
      errno = err;
      return nullptr;
    }
    e->fts_level = FTS_ROOTLEVEL;
    e->fts_info = StatInfo(*w, e, (options & FTS_COMFOLLOW) != 0);
    *tail = e;
    tail = &e->fts_link;
  }
  w->roots = Sort(*w, w->roots);
  try {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_walks == nullptr) g_walks = new std::unordered_set<void*>;
    g_walks->insert(w);
  } catch (...) {
    FreeList(w->roots);
    FreeEntry(w->parent);
    delete w;
    errno = ENOMEM;
    return nullptr;
  }
  g_live.fetch_add(1, std::memory_order_release);
  return &w->pub;
}

FTSENT* Visit(Walk& w, FTSENT* e) {
  w.cur = e;
  w.pub.fts_cur = e;
  w.pub.fts_path = e->fts_path;
  if (e->fts_level == FTS_ROOTLEVEL && e->fts_info == FTS_D) w.root_dev = e->fts_dev;
  return e;
}

FTSENT* Read(Walk& w) {
  if (w.done) return nullptr;
  if (w.cur == nullptr) {
    if (w.roots == nullptr) {
      w.done = true;
      return nullptr;
    }
    return Visit(w, w.roots);
  }
  FTSENT* p = w.cur;
  int instr = p->fts_instr;
  p->fts_instr = FTS_NOINSTR;
  if (instr == FTS_AGAIN) {
    p->fts_info = StatInfo(w, p, false);
    return Visit(w, p);
  }
  if (instr == FTS_FOLLOW && (p->fts_info == FTS_SL || p->fts_info == FTS_SLNONE)) {
    p->fts_info = StatInfo(w, p, true);
    if (p->fts_info == FTS_D) p->fts_flags |= FTS_SYMFOLLOW;
    return Visit(w, p);
  }
  Node* n = NodeOf(p);
  if (p->fts_info == FTS_D) {
    if (instr == FTS_SKIP || ((w.pub.fts_options & FTS_XDEV) && p->fts_dev != w.root_dev)) {
      FreeList(n->children);
      n->children = nullptr;
      p->fts_info = FTS_DP;
      return Visit(w, p);
    }
    if (n->children != nullptr && n->names_only) {
      FreeList(n->children);
      n->children = nullptr;
    }
    if (n->children == nullptr) n->children = Build(w, p, false, true);
    n->names_only = false;
    if (n->children == nullptr) return w.done ? nullptr : Visit(w, p);  // FTS_DP (empty) or FTS_DNR
    return Visit(w, n->children);
  }
  // Next sibling, or back up to the parent's post-order visit.
  if (p->fts_link != nullptr) return Visit(w, p->fts_link);
  FTSENT* parent = p->fts_parent;
  if (parent == nullptr || parent->fts_level == FTS_ROOTPARENTLEVEL) {
    w.done = true;
    errno = 0;
    return nullptr;
  }
  // The parent's children (p among them) are freed: the caller may only use p until this call.
  Node* pn = NodeOf(parent);
  FreeList(pn->children);
  pn->children = nullptr;
  parent->fts_info = FTS_DP;
  return Visit(w, parent);
}

FTSENT* Children(Walk& w, int instr) {
  if (instr != 0 && instr != FTS_NAMEONLY) {
    errno = EINVAL;
    return nullptr;
  }
  errno = 0;
  if (w.done) return nullptr;
  if (w.cur == nullptr) return w.roots;  // before the first fts_read: the roots
  FTSENT* p = w.cur;
  if (p->fts_info != FTS_D) return nullptr;
  Node* n = NodeOf(p);
  FreeList(n->children);
  n->children = Build(w, p, instr == FTS_NAMEONLY, false);
  n->names_only = instr == FTS_NAMEONLY;
  return n->children;
}

int Close(Walk* w) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_walks->erase(w);
  }
  g_live.fetch_sub(1, std::memory_order_release);
  // Entries still linked: the roots (with whatever children are built below them).
  FreeList(w->roots);
  FreeEntry(w->parent);
  delete w;
  return 0;
}

bool AnyRootReachesMount(char* const* argv) {
  if (!Active()) return false;
  for (; argv != nullptr && *argv != nullptr; ++argv)
    if (ancestors::WalkReaches(*argv)) return true;
  return false;
}

int Set(FTSENT* e, int instr) {
  if (instr != 0 && instr != FTS_AGAIN && instr != FTS_FOLLOW && instr != FTS_NOINSTR && instr != FTS_SKIP) {
    errno = EINVAL;
    return 1;
  }
  e->fts_instr = static_cast<unsigned short>(instr);
  return 0;
}

}  // namespace

FS_WRAPPER(FTS*, fts_open, (char* const* argv, int options, Compar compar)) {
  if (!AnyRootReachesMount(argv)) return FS_REAL(fts_open, argv, options, compar);
  return Open(argv, options, compar);
}
FS_WRAPPER(FTSENT*, fts_read, (FTS * sp)) {
  Walk* w = Find(sp);
  return w ? Read(*w) : FS_REAL(fts_read, sp);
}
FS_WRAPPER(FTSENT*, fts_children, (FTS * sp, int instr)) {
  Walk* w = Find(sp);
  return w ? Children(*w, instr) : FS_REAL(fts_children, sp, instr);
}
FS_WRAPPER(int, fts_set, (FTS * sp, FTSENT* e, int instr)) {
  return Find(sp) ? Set(e, instr) : FS_REAL(fts_set, sp, e, instr);
}
FS_WRAPPER(int, fts_close, (FTS * sp)) {
  Walk* w = Find(sp);
  return w ? Close(w) : FS_REAL(fts_close, sp);
}

using Compar64 = int (*)(const FTSENT64**, const FTSENT64**);
FS_WRAPPER(FTS64*, fts64_open, (char* const* argv, int options, Compar64 compar)) {
  if (!AnyRootReachesMount(argv)) return FS_REAL(fts64_open, argv, options, compar);
  return reinterpret_cast<FTS64*>(Open(argv, options, reinterpret_cast<Compar>(compar)));
}
FS_WRAPPER(FTSENT64*, fts64_read, (FTS64 * sp)) {
  Walk* w = Find(sp);
  return w ? reinterpret_cast<FTSENT64*>(Read(*w)) : FS_REAL(fts64_read, sp);
}
FS_WRAPPER(FTSENT64*, fts64_children, (FTS64 * sp, int instr)) {
  Walk* w = Find(sp);
  return w ? reinterpret_cast<FTSENT64*>(Children(*w, instr)) : FS_REAL(fts64_children, sp, instr);
}
FS_WRAPPER(int, fts64_set, (FTS64 * sp, FTSENT64* e, int instr)) {
  return Find(sp) ? Set(reinterpret_cast<FTSENT*>(e), instr) : FS_REAL(fts64_set, sp, e, instr);
}
FS_WRAPPER(int, fts64_close, (FTS64 * sp)) {
  Walk* w = Find(sp);
  return w ? Close(w) : FS_REAL(fts64_close, sp);
}
