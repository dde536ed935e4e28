// Tree walks that glibc does with internal calls no wrapper sees: glob (via GLOB_ALTDIRFUNC) and
// ftw/nftw (a small walker on the wrapped calls), for paths under the mount.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "ancestors.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

// ---- glob: glibc's own implementation, reading directories through our wrapped calls.

void* GlOpendir(const char* p) { return opendir(p); }
void GlClosedir(void* d) { closedir(static_cast<DIR*>(d)); }
struct dirent* GlReaddir(void* d) {
  return readdir(static_cast<DIR*>(d));
}
struct dirent64* GlReaddir64(void* d) {
  return readdir64(static_cast<DIR*>(d));
}

template <class G, class ReaddirFn, class StatFn, class Real>
int GlobOurs(const char* pattern, int flags, int (*errfunc)(const char*, int), G* pglob, ReaddirFn rd, StatFn st,
             StatFn lst, Real real) {
  pglob->gl_opendir = GlOpendir;
  pglob->gl_closedir = GlClosedir;
  pglob->gl_readdir = rd;
  pglob->gl_stat = st;
  pglob->gl_lstat = lst;
  int rc = real(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob);
  pglob->gl_flags &= ~GLOB_ALTDIRFUNC;  // the caller did not ask for it
  return rc;
}

// ---- ftw/nftw: a depth-first walker over the wrapped stat/opendir/readdir/chdir.

struct Walk {
  // nftw's callback, or ftw's (which has no struct FTW argument).
  int (*nfn)(const char*, const struct stat*, int, struct FTW*) = nullptr;
  int (*fn)(const char*, const struct stat*, int) = nullptr;
  int flags = 0;
  dev_t dev = 0;
  std::string cwd0;  // absolute cwd at the start (FTW_CHDIR)
};

constexpr int kSkipSiblings = -1000;  // internal: FTW_SKIP_SIBLINGS from a child

// Calls the user's callback outside any guard (it is ordinary program code).
int Call(Walk& w, const std::string& path, const struct stat* st, int type, int base, int level) {
  if (w.fn != nullptr) return w.fn(path.c_str(), st, type);
  struct FTW f;
  f.base = base;
  f.level = level;
  return w.nfn(path.c_str(), st, type, &f);
}

// Maps a callback result to "stop with this value" (non-zero) or "go on" (0).
int Verdict(const Walk& w, int rc, bool* skip_subtree, bool* skip_siblings) {
  if (!(w.flags & FTW_ACTIONRETVAL)) return rc;
  switch (rc) {
    case FTW_CONTINUE: return 0;
    case FTW_SKIP_SUBTREE: *skip_subtree = true; return 0;
    case FTW_SKIP_SIBLINGS: *skip_siblings = true; return 0;
    default: return rc;  // FTW_STOP and anything else ends the walk
  }
}

std::string Absolute(const Walk& w, const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  return w.cwd0 + "/" + p;
}

int WalkEntry(Walk& w, const std::string& path, int base, int level, bool* skip_siblings);

int WalkDir(Walk& w, const std::string& path, const struct stat& st, int base, int level, bool* skip_siblings) {
  bool skip_subtree = false;
  int rc = 0;
  if (!(w.flags & FTW_DEPTH)) {
    rc = Verdict(w, Call(w, path, &st, FTW_D, base, level), &skip_subtree, skip_siblings);
    if (rc != 0 || skip_subtree) return rc;
  }
  DIR* d = opendir(path.c_str());
  if (d == nullptr) {
    bool ignore = false;
    return Verdict(w, Call(w, path, &st, FTW_DNR, base, level), &ignore, skip_siblings);
  }
  // Read the whole listing first: one directory fd open at a time, whatever the depth.
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  closedir(d);
  if ((w.flags & FTW_CHDIR) && chdir(Absolute(w, path).c_str()) != 0) return -1;
  std::string prefix = path == "/" ? path : path + "/";
  bool sibling_stop = false;
  for (const std::string& name : names) {
    rc = WalkEntry(w, prefix + name, static_cast<int>(prefix.size()), level + 1, &sibling_stop);
    if (rc != 0 || sibling_stop) break;
  }
  if (w.flags & FTW_CHDIR) {
    // Back to the directory holding `path`, where its FTW_DP callback runs.
    std::string parent = Absolute(w, path.substr(0, static_cast<size_t>(base)));
    if (parent.empty()) parent = "/";
    if (chdir(parent.c_str()) != 0 && rc == 0) return -1;
  }
  if (rc != 0) return rc;
  if (w.flags & FTW_DEPTH) {
    bool ignore = false;
    rc = Verdict(w, Call(w, path, &st, FTW_DP, base, level), &ignore, skip_siblings);
  }
  return rc;
}

int WalkEntry(Walk& w, const std::string& path, int base, int level, bool* skip_siblings) {
  struct stat st;
  bool phys = (w.flags & FTW_PHYS) != 0;
  int src = phys ? lstat(path.c_str(), &st) : stat(path.c_str(), &st);
  bool ignore = false;
  if (src != 0) {
    // As glibc: only a missing or forbidden entry is reported (FTW_NS, or FTW_SLN for a dangling link); any other
    // error (ELOOP from a symlink loop, EIO) ends the walk with -1 and errno.
    if (errno != ENOENT && errno != EACCES) return -1;
    if (!phys && lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      return Verdict(w, Call(w, path, &st, w.fn ? FTW_NS : FTW_SLN, base, level), &ignore, skip_siblings);
    return Verdict(w, Call(w, path, &st, FTW_NS, base, level), &ignore, skip_siblings);
  }
  if ((w.flags & FTW_MOUNT) && st.st_dev != w.dev) return 0;
  if (S_ISDIR(st.st_mode)) return WalkDir(w, path, st, base, level, skip_siblings);
  int type = S_ISLNK(st.st_mode) && w.fn == nullptr ? FTW_SL : FTW_F;  // ftw reports links as FTW_F
  return Verdict(w, Call(w, path, &st, type, base, level), &ignore, skip_siblings);
}

// The start of ftw/nftw: trailing slashes stripped, the root stat'd (failure is -1 with errno, no
// callback), FTW_CHDIR's cwd saved and restored.
int WalkStart(Walk& w, const char* dir) {
  if (dir == nullptr || dir[0] == '\0') {
    errno = ENOENT;
    return -1;
  }
  std::string path = dir;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.rfind('/');
  int base = slash == std::string::npos ? 0 : static_cast<int>(slash + 1);
  if (path == "/") base = 0;
  struct stat st;
  int src = (w.flags & FTW_PHYS) ? lstat(path.c_str(), &st) : stat(path.c_str(), &st);
  if (src != 0) return -1;
  w.dev = st.st_dev;
  if (w.flags & FTW_CHDIR) {
    char buf[PATH_MAX];
    if (getcwd(buf, sizeof buf) == nullptr) return -1;
    w.cwd0 = buf;
    // The root's callback runs in the directory that holds it.
    std::string parent = Absolute(w, path.substr(0, static_cast<size_t>(base)));
    if (chdir(parent.empty() ? "/" : parent.c_str()) != 0) return -1;
  }
  bool ignore = false;
  int rc;
  if (S_ISDIR(st.st_mode)) {
    rc = WalkDir(w, path, st, base, 0, &ignore);
  } else {
    rc = Verdict(w, Call(w, path, &st, FTW_F, base, 0), &ignore, &ignore);
  }
  if (w.flags & FTW_CHDIR) {
    int saved = errno;
    if (chdir(w.cwd0.c_str()) == 0) errno = saved;
  }
  return rc;
}

template <class Fn>
int NftwOurs(const char* dir, Fn fn, int flags) noexcept {
  try {
    Walk w;
    w.nfn = reinterpret_cast<int (*)(const char*, const struct stat*, int, struct FTW*)>(fn);
    w.flags = flags;
    return WalkStart(w, dir);
  } catch (...) {  // std::bad_alloc from a path string: nothing may unwind into C
    errno = ENOMEM;
    return -1;
  }
}

template <class Fn>
int FtwOurs(const char* dir, Fn fn) noexcept {
  try {
    Walk w;
    w.fn = reinterpret_cast<int (*)(const char*, const struct stat*, int)>(fn);
    return WalkStart(w, dir);
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

}  // namespace

using GlobErr = int (*)(const char*, int);

FS_WRAPPER(int, glob, (const char* pattern, int flags, GlobErr errfunc, glob_t* pglob)) {
  if ((flags & GLOB_ALTDIRFUNC) || !(ancestors::WalkReaches(pattern) || ancestors::PatternReaches(pattern)))
    return FS_REAL(glob, pattern, flags, errfunc, pglob);
  return GlobOurs(pattern, flags, errfunc, pglob, GlReaddir, static_cast<int (*)(const char*, struct stat*)>(stat),
                  static_cast<int (*)(const char*, struct stat*)>(lstat),
                  [](const char* p, int f, GlobErr e, glob_t* g) { return FS_REAL(glob, p, f, e, g); });
}

FS_WRAPPER(int, glob64, (const char* pattern, int flags, GlobErr errfunc, glob64_t* pglob)) {
  if ((flags & GLOB_ALTDIRFUNC) || !(ancestors::WalkReaches(pattern) || ancestors::PatternReaches(pattern)))
    return FS_REAL(glob64, pattern, flags, errfunc, pglob);
  return GlobOurs(pattern, flags, errfunc, pglob, GlReaddir64,
                  static_cast<int (*)(const char*, struct stat64*)>(stat64),
                  static_cast<int (*)(const char*, struct stat64*)>(lstat64),
                  [](const char* p, int f, GlobErr e, glob64_t* g) { return FS_REAL(glob64, p, f, e, g); });
}

using NftwFn = int (*)(const char*, const struct stat*, int, struct FTW*);
using Nftw64Fn = int (*)(const char*, const struct stat64*, int, struct FTW*);
using FtwFn = int (*)(const char*, const struct stat*, int);
using Ftw64Fn = int (*)(const char*, const struct stat64*, int);

FS_WRAPPER(int, nftw, (const char* dir, NftwFn fn, int nopenfd, int flags)) {
  if (!ancestors::WalkReaches(dir)) return FS_REAL(nftw, dir, fn, nopenfd, flags);
  return NftwOurs(dir, fn, flags);
}
FS_WRAPPER(int, nftw64, (const char* dir, Nftw64Fn fn, int nopenfd, int flags)) {
  if (!ancestors::WalkReaches(dir)) return FS_REAL(nftw64, dir, fn, nopenfd, flags);
  return NftwOurs(dir, fn, flags);
}
FS_WRAPPER(int, ftw, (const char* dir, FtwFn fn, int nopenfd)) {
  if (!ancestors::WalkReaches(dir)) return FS_REAL(ftw, dir, fn, nopenfd);
  return FtwOurs(dir, fn);
}
FS_WRAPPER(int, ftw64, (const char* dir, Ftw64Fn fn, int nopenfd)) {
  if (!ancestors::WalkReaches(dir)) return FS_REAL(ftw64, dir, fn, nopenfd);
  return FtwOurs(dir, fn);
}
