// Temporary files: mkstemp/mkostemp/mkstemps/mkostemps (and 64), mkdtemp, tmpfile, tempnam. glibc creates
// them with internal open/mkdir calls no wrapper sees, so under the mount they would land in a real
// directory (or fail with the wrong errno): the outer call is answered here, as a read-only mount would.
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "fd_identity.hpp"
#include "wrap.hpp"

using namespace fanstore::interpose;

namespace {

constexpr int kXs = 6;  // glibc's template needs six trailing X (before the suffix)

// Fills the six X of tmpl (which end `suffixlen` bytes before its end) with random letters and digits,
// as glibc does before it tries the name.
void FillRandom(char* x) {
  static const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  unsigned char r[kXs];
  if (getrandom(r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t v = static_cast<uint64_t>(ts.tv_nsec) * 6364136223846793005ull + static_cast<uint64_t>(getpid());
    for (int i = 0; i < kXs; ++i, v >>= 8) r[i] = static_cast<unsigned char>(v);
  }
  for (int i = 0; i < kXs; ++i) x[i] = kLetters[r[i] % (sizeof kLetters - 1)];
}

// glibc's template check: at least six X before the suffix; EINVAL otherwise (before any syscall).
char* Xs(char* tmpl, int suffixlen) {
  if (tmpl == nullptr || suffixlen < 0) return nullptr;
  size_t len = strlen(tmpl);
  const size_t suffix = static_cast<size_t>(suffixlen);
  if (suffix > len || len - suffix < static_cast<size_t>(kXs)) return nullptr;
  char* x = tmpl + len - kXs - suffixlen;
  for (int i = 0; i < kXs; ++i)
    if (x[i] != 'X') return nullptr;
  return x;
}

// A template under the mount: the name is made, then creating it fails as on a read-only mount
// (EROFS; the parent's ENOENT/ENOTDIR when that is missing). -1 with errno, or 0 when not ours.
int RefuseTemplate(const char* call, char* tmpl, int suffixlen, bool* ours) {
  *ours = false;
  if (!Active() || tmpl == nullptr) return 0;
  Resolved r = SafeClassify(AT_FDCWD, tmpl);
  if (r.pass()) return 0;
  *ours = true;
  char* x = Xs(tmpl, suffixlen);
  if (x == nullptr) {
    TraceCall(call, tmpl, -1, EINVAL);
    errno = EINVAL;
    return -1;
  }
  FillRandom(x);
  int saved = errno;
  int err = r.kind == Resolved::kFail
                ? r.err
                : Serve(
                      [&] {
                        Resolved named = SafeClassify(AT_FDCWD, tmpl);
                        int e = named.kind == Resolved::kFail ? named.err : CreateErrno(named);
                        return e == EEXIST ? EROFS : e;  // glibc would try another name; every name is refused alike
                      },
                      ENOMEM);
  return static_cast<int>(Finish(call, tmpl, -1, err, saved));
}

template <class Real>
int MkstempCommon(const char* call, char* tmpl, int suffixlen, Real real) noexcept {
  bool ours;
  int rc = RefuseTemplate(call, tmpl, suffixlen, &ours);
  if (ours) return rc;
  int fd = real();
  if (fd >= 0) fd_identity::Reused(fd);  // opened inside libc: the number is the program's
  return fd;
}

// tmpfile() creates its file in P_tmpdir ("/tmp"), which is ours only when the mount covers it.
bool TmpdirIsOurs(int* err) {
  if (!Active()) return false;
  Resolved r = SafeClassify(AT_FDCWD, P_tmpdir);
  if (r.pass()) return false;
  int saved = errno;
  *err = Serve(
      [&] {
        LookUp(&r);
        return r.kind == Resolved::kFail ? r.err : EROFS;
      },
      ENOMEM);
  errno = saved;
  return true;
}

template <class Real>
FILE* TmpfileCommon(const char* call, Real real) noexcept {
  int err = 0;
  if (TmpdirIsOurs(&err)) {
    TraceCall(call, P_tmpdir, -1, err);
    errno = err;
    return nullptr;
  }
  FILE* f = real();
  if (f != nullptr) fd_identity::Reused(fileno(f));
  return f;
}

bool IsDir(const char* p) {
  struct stat st;
  return p != nullptr && stat(p, &st) == 0 && S_ISDIR(st.st_mode);  // our stat: image or real
}

}  // namespace

FS_WRAPPER(int, mkstemp, (char* tmpl)) {
  return MkstempCommon("mkstemp", tmpl, 0, [&] { return FS_REAL(mkstemp, tmpl); });
}
FS_WRAPPER(int, mkstemp64, (char* tmpl)) {
  return MkstempCommon("mkstemp64", tmpl, 0, [&] { return FS_REAL(mkstemp64, tmpl); });
}
FS_WRAPPER(int, mkostemp, (char* tmpl, int flags)) {
  return MkstempCommon("mkostemp", tmpl, 0, [&] { return FS_REAL(mkostemp, tmpl, flags); });
}
FS_WRAPPER(int, mkostemp64, (char* tmpl, int flags)) {
  return MkstempCommon("mkostemp64", tmpl, 0, [&] { return FS_REAL(mkostemp64, tmpl, flags); });
}
FS_WRAPPER(int, mkstemps, (char* tmpl, int suffixlen)) {
  return MkstempCommon("mkstemps", tmpl, suffixlen, [&] { return FS_REAL(mkstemps, tmpl, suffixlen); });
}
FS_WRAPPER(int, mkstemps64, (char* tmpl, int suffixlen)) {
  return MkstempCommon("mkstemps64", tmpl, suffixlen, [&] { return FS_REAL(mkstemps64, tmpl, suffixlen); });
}
FS_WRAPPER(int, mkostemps, (char* tmpl, int suffixlen, int flags)) {
  return MkstempCommon("mkostemps", tmpl, suffixlen, [&] { return FS_REAL(mkostemps, tmpl, suffixlen, flags); });
}
FS_WRAPPER(int, mkostemps64, (char* tmpl, int suffixlen, int flags)) {
  return MkstempCommon("mkostemps64", tmpl, suffixlen, [&] { return FS_REAL(mkostemps64, tmpl, suffixlen, flags); });
}

FS_WRAPPER(char*, mkdtemp, (char* tmpl)) {
  bool ours;
  int rc = RefuseTemplate("mkdtemp", tmpl, 0, &ours);
  if (ours) return rc == 0 ? tmpl : nullptr;
  return FS_REAL(mkdtemp, tmpl);
}

FS_WRAPPER(FILE*, tmpfile, ()) {
  return TmpfileCommon("tmpfile", [] { return FS_REAL(tmpfile); });
}
FS_WRAPPER(FILE*, tmpfile64, ()) {
  return TmpfileCommon("tmpfile64", [] { return FS_REAL(tmpfile64); });
}

// tempnam only makes a name. glibc picks the directory with internal stat calls (TMPDIR, then `dir`, then
// P_tmpdir), which see no image directory; when one of them is ours, pick it as glibc would, through our
// stat, and make a name that is free in it.
FS_WRAPPER(char*, tempnam, (const char* dir, const char* pfx)) {
  const char* tmpdir = secure_getenv("TMPDIR");
  auto ours = [](const char* p) { return p != nullptr && Active() && !SafeClassify(AT_FDCWD, p).pass(); };
  if (!ours(tmpdir) && !ours(dir) && !ours(P_tmpdir)) return FS_REAL(tempnam, dir, pfx);
  const char* d = nullptr;
  if (tmpdir != nullptr && IsDir(tmpdir)) {
    d = tmpdir;
  } else if (dir != nullptr && IsDir(dir)) {
    d = dir;
  } else if (IsDir(P_tmpdir)) {
    d = P_tmpdir;
  } else {
    errno = ENOENT;
    return nullptr;
  }
  size_t dlen = strlen(d);
  while (dlen > 1 && d[dlen - 1] == '/') --dlen;
  const char* p = (pfx != nullptr && *pfx != '\0') ? pfx : "file";
  size_t plen = strlen(p) < 5 ? strlen(p) : 5;
  char buf[PATH_MAX];
  if (dlen + 1 + plen + kXs + 1 > sizeof buf) {
    errno = EINVAL;
    return nullptr;
  }
  int saved = errno;
  for (int attempt = 0; attempt < 100; ++attempt) {
    snprintf(buf, sizeof buf, "%.*s/%.*sXXXXXX", static_cast<int>(dlen), d, static_cast<int>(plen), p);
    FillRandom(buf + dlen + 1 + plen);
    struct stat st;
    if (lstat(buf, &st) != 0 && errno == ENOENT) {
      errno = saved;
      return strdup(buf);
    }
  }
  errno = EEXIST;
  return nullptr;
}
