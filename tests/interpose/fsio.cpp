// fsio: a "one syscall at a time" harness. Reads a script of libc calls on stdin, runs each one and prints
// its return value, errno and key outputs, so the same script can be diffed between a real directory
// tree and the same tree served through libfanstore_preload.so.
//
// Usage: fsio ROOT < script. In the script "@" at the start of a path stands for ROOT, and in the output
// ROOT is printed back as "@", so runs against different roots compare equal. Handles ("h1", "d1") name
// fds and DIR*s created by earlier lines. Lines starting with '#' are echoed, blank lines ignored.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fts.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string g_root;
std::map<std::string, int> g_fds;
std::map<std::string, DIR*> g_dirs;

// "@" at the start of a path stands for ROOT, "^" for ROOT's parent directory and "%" for ROOT's own name
// (relative, for calls against a directory fd of the parent or after a chdir into it).
std::string Parent() {
  size_t slash = g_root.find_last_of('/');
  return slash == 0 || slash == std::string::npos ? "/" : g_root.substr(0, slash);
}
std::string BaseName() { return g_root.substr(g_root.find_last_of('/') + 1); }
std::string Path(const std::string& p) {
  if (p.empty()) return p;
  if (p[0] == '@') return g_root + p.substr(1);
  if (p[0] == '^') return Parent() + p.substr(1);
  if (p[0] == '%') return BaseName() + p.substr(1);
  return p;
}
// Replaces ROOT by "@" in outputs (getcwd, realpath).
std::string Unroot(const std::string& s) {
  if (s.compare(0, g_root.size(), g_root) == 0) return "@" + s.substr(g_root.size());
  return s;
}

int Flags(const std::string& s) {
  static const std::map<std::string, int> kFlags = {
      {"O_RDONLY", O_RDONLY},     {"O_WRONLY", O_WRONLY},   {"O_RDWR", O_RDWR},         {"O_CREAT", O_CREAT},
      {"O_TRUNC", O_TRUNC},       {"O_EXCL", O_EXCL},       {"O_APPEND", O_APPEND},     {"O_DIRECTORY", O_DIRECTORY},
      {"O_CLOEXEC", O_CLOEXEC},   {"O_NOFOLLOW", O_NOFOLLOW}, {"O_PATH", O_PATH}, {"O_TMPFILE", O_TMPFILE},       {"AT_EMPTY_PATH", AT_EMPTY_PATH},
      {"AT_SYMLINK_NOFOLLOW", AT_SYMLINK_NOFOLLOW}, {"AT_EACCESS", AT_EACCESS},
      {"FTW_PHYS", FTW_PHYS}, {"FTW_DEPTH", FTW_DEPTH}, {"FTW_MOUNT", FTW_MOUNT}, {"FTW_CHDIR", FTW_CHDIR},
      {"FTS_PHYSICAL", FTS_PHYSICAL}, {"FTS_LOGICAL", FTS_LOGICAL}, {"FTS_NOSTAT", FTS_NOSTAT},
      {"FTS_SEEDOT", FTS_SEEDOT}, {"FTS_XDEV", FTS_XDEV}, {"FTS_NOCHDIR", FTS_NOCHDIR},
      {"GLOB_MARK", GLOB_MARK}, {"GLOB_ONLYDIR", GLOB_ONLYDIR}, {"GLOB_NOCHECK", GLOB_NOCHECK}, {"F_OK", F_OK}, {"R_OK", R_OK}, {"W_OK", W_OK}, {"X_OK", X_OK},
      {"0", 0}};
  int f = 0;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '|')) {
    auto it = kFlags.find(part);
    if (it == kFlags.end()) {
      std::cerr << "fsio: unknown flag " << part << "\n";
      exit(2);
    }
    f |= it->second;
  }
  return f;
}

int Fd(const std::string& name) {
  if (name == "AT_FDCWD") return AT_FDCWD;
  auto it = g_fds.find(name);
  if (it == g_fds.end()) {
    std::cerr << "fsio: unknown handle " << name << "\n";
    exit(2);
  }
  return it->second;
}

// FNV-1a: enough to tell byte streams apart in a diff.
uint64_t Hash(const char* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

std::string Stat(const struct stat& st) {
  char b[256];
  // No inode or device: they differ between two file systems. Directory sizes differ by file system too.
  snprintf(b, sizeof b, "mode=%o size=%lld nlink=%lu uid=%u gid=%u mtime=%lld ino_set=%d", st.st_mode,
           S_ISDIR(st.st_mode) ? 0LL : static_cast<long long>(st.st_size), static_cast<unsigned long>(st.st_nlink),
           st.st_uid, st.st_gid, static_cast<long long>(st.st_mtim.tv_sec), st.st_ino != 0);
  return b;
}

void Report(const std::string& op, long ret, int err, const std::string& extra = "");
// Runs a call, then reads errno (argument evaluation order would otherwise be unspecified).
void Call(const std::string& op, long ret) { Report(op, ret, errno); }

void Report(const std::string& op, long ret, int err, const std::string& extra) {
  std::cout << op << " = " << ret;
  if (ret < 0) std::cout << " " << (strerrorname_np(err) ? strerrorname_np(err) : "?");
  if (!extra.empty()) std::cout << " " << extra;
  std::cout << "\n";
}

std::string ReadAllHash(int fd, long* total) {
  char buf[65536];
  uint64_t h = 1469598103934665603ull;
  *total = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) {
      if (n < 0) *total = -1;
      break;
    }
    h = Hash(buf, static_cast<size_t>(n), h);
    *total += n;
  }
  char o[64];
  snprintf(o, sizeof o, "hash=%016llx", static_cast<unsigned long long>(h));
  return o;
}

std::string Listing(DIR* d) {
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* e = readdir(d)) {
    char t[8];
    snprintf(t, sizeof t, ":%d", e->d_type);
    names.push_back(std::string(e->d_name) + t);
  }
  std::sort(names.begin(), names.end());
  std::string out = "[";
  for (auto& n : names) out += n + " ";
  return out + "]";
}

// scandir_cb: a filter that stats each entry by its full path and opens a file it keeps, as real
// programs' callbacks do; both must be served like any other call of the program.
std::string g_scan_dir;
int g_scan_stat_ok = 0;
std::vector<int> g_scan_fds;
int ScanFilter(const struct dirent* e) {
  if (e->d_name[0] == '.') return 0;
  struct stat s;
  if (stat((g_scan_dir + "/" + e->d_name).c_str(), &s) == 0) ++g_scan_stat_ok;
  int fd = open((g_scan_dir + "/" + e->d_name).c_str(), O_RDONLY);
  if (fd >= 0) g_scan_fds.push_back(fd);
  return 1;
}
int ScanCompar(const struct dirent** a, const struct dirent** b) {
  // Sort by size (then name) through stat: compar's calls must be served too.
  struct stat sa{}, sb{};
  stat((g_scan_dir + "/" + (*a)->d_name).c_str(), &sa);
  stat((g_scan_dir + "/" + (*b)->d_name).c_str(), &sb);
  if (S_ISDIR(sa.st_mode)) sa.st_size = 0;
  if (S_ISDIR(sb.st_mode)) sb.st_size = 0;
  if (sa.st_size != sb.st_size) return sa.st_size < sb.st_size ? -1 : 1;
  return strcmp((*a)->d_name, (*b)->d_name);
}

// nftw/ftw: every visit as "path:type:level" (sorted: directory order differs between file systems),
// plus the cwd seen in the callback under FTW_CHDIR; `g_walk_stop_at` > 0 stops the walk at that visit.
std::vector<std::string> g_walk;
int g_walk_stop_at = 0;
bool g_walk_cwd = false;
int WalkCb(const char* p, const struct stat* s, int type, struct FTW* f) {
  std::string t = type == FTW_F ? "F" : type == FTW_D ? "D" : type == FTW_DP ? "DP" : type == FTW_NS ? "NS"
                : type == FTW_DNR ? "DNR" : "SL";
  std::string v = Unroot(p) + ":" + t + ":" + std::to_string(f->level) + ":" +
                  (f->level ? std::string(p + f->base) : "ROOT");  // the root's own name differs by tree
  if (type != FTW_NS) v += S_ISDIR(s->st_mode) ? ":dir" : ":size=" + std::to_string(s->st_size);
  if (g_walk_cwd) {
    char buf[PATH_MAX];
    v += std::string(":cwd=") + (getcwd(buf, sizeof buf) ? Unroot(buf) : "?");
  }
  g_walk.push_back(v);
  return static_cast<int>(g_walk.size()) == g_walk_stop_at ? 42 : 0;
}
int FtwCb(const char* p, const struct stat* s, int type) {
  std::string t = type == FTW_F ? "F" : type == FTW_D ? "D" : type == FTW_NS ? "NS" : "DNR";
  g_walk.push_back(Unroot(p) + ":" + t + (S_ISDIR(s->st_mode) ? "" : ":size=" + std::to_string(s->st_size)));
  return 0;
}
std::string Joined(std::vector<std::string> v, bool sort) {
  if (sort) std::sort(v.begin(), v.end());
  std::string out = "[";
  for (auto& s : v) out += s + " ";
  return out + "]";
}

void Run(const std::string& line) {
  std::stringstream ss(line);
  std::vector<std::string> a;
  std::string w;
  while (ss >> w) a.push_back(w);
  if (a.empty()) return;
  const std::string& op = a[0];
  auto arg = [&](size_t i) -> const std::string& {
    if (i >= a.size()) {
      std::cerr << "fsio: missing argument " << i << " in: " << line << "\n";
      exit(2);
    }
    return a[i];
  };
  errno = 0;
  struct stat st;
  if (op == "open") {  // open H PATH FLAGS
    int fd = open(Path(arg(2)).c_str(), Flags(arg(3)), 0644);
    int e = errno;
    if (fd >= 0) g_fds[arg(1)] = fd;
    Report(line, fd < 0 ? -1 : 0, e);
  } else if (op == "openat") {  // openat H DIRH PATH FLAGS
    int fd = openat(Fd(arg(2)), Path(arg(3)).c_str(), Flags(arg(4)), 0644);
    int e = errno;
    if (fd >= 0) g_fds[arg(1)] = fd;
    Report(line, fd < 0 ? -1 : 0, e);
  } else if (op == "creat") {
    int fd = creat(Path(arg(1)).c_str(), 0644);
    Report(line, fd < 0 ? -1 : 0, errno);
  } else if (op == "close") {
    int rc = close(Fd(arg(1)));
    Report(line, rc, errno);
  } else if (op == "readall") {  // readall H
    long total;
    std::string h = ReadAllHash(Fd(arg(1)), &total);
    Report(line, total, errno, h);
  } else if (op == "read") {  // read H N: prints the bytes when printable
    std::string buf(std::stoul(arg(2)), '\0');
    ssize_t n = read(Fd(arg(1)), buf.data(), buf.size());
    int e = errno;
    char h[32];
    snprintf(h, sizeof h, "hash=%016llx", static_cast<unsigned long long>(Hash(buf.data(), n > 0 ? n : 0)));
    Report(line, n, e, h);
  } else if (op == "pread") {  // pread H N OFF
    std::string buf(std::stoul(arg(2)), '\0');
    ssize_t n = pread(Fd(arg(1)), buf.data(), buf.size(), std::stol(arg(3)));
    int e = errno;
    char h[32];
    snprintf(h, sizeof h, "hash=%016llx", static_cast<unsigned long long>(Hash(buf.data(), n > 0 ? n : 0)));
    Report(line, n, e, h);
  } else if (op == "lseek") {  // lseek H OFF SET|CUR|END
    int wh = arg(3) == "SET" ? SEEK_SET : arg(3) == "CUR" ? SEEK_CUR : SEEK_END;
    off_t r = lseek(Fd(arg(1)), std::stol(arg(2)), wh);
    Report(line, r, errno);
  } else if (op == "stat" || op == "lstat") {
    int rc = op == "stat" ? stat(Path(arg(1)).c_str(), &st) : lstat(Path(arg(1)).c_str(), &st);
    Report(line, rc, errno, rc == 0 ? Stat(st) : "");
  } else if (op == "fstat") {
    int rc = fstat(Fd(arg(1)), &st);
    Report(line, rc, errno, rc == 0 ? Stat(st) : "");
  } else if (op == "fstatat") {  // fstatat DIRH PATH FLAGS ("" path: write -)
    std::string p = arg(2) == "-" ? "" : Path(arg(2));
    int rc = fstatat(Fd(arg(1)), p.c_str(), &st, Flags(arg(3)));
    Report(line, rc, errno, rc == 0 ? Stat(st) : "");
  } else if (op == "statx") {  // statx DIRH PATH FLAGS
    std::string p = arg(2) == "-" ? "" : Path(arg(2));
    struct statx sx;
    int rc = statx(Fd(arg(1)), p.c_str(), Flags(arg(3)), STATX_BASIC_STATS, &sx);
    char b[160] = "";
    if (rc == 0)
      snprintf(b, sizeof b, "mode=%o size=%llu mtime=%lld", sx.stx_mode,
               S_ISDIR(sx.stx_mode) ? 0ULL : static_cast<unsigned long long>(sx.stx_size),
               static_cast<long long>(sx.stx_mtime.tv_sec));
    Report(line, rc, errno, b);
  } else if (op == "access") {
    int rc = access(Path(arg(1)).c_str(), Flags(arg(2)));
    Report(line, rc, errno);
  } else if (op == "faccessat") {  // faccessat DIRH PATH MODE [FLAGS] ("" path: write -)
    std::string p = arg(2) == "-" ? "" : Path(arg(2));
    int rc = faccessat(Fd(arg(1)), p.c_str(), Flags(arg(3)), a.size() > 4 ? Flags(arg(4)) : 0);
    Report(line, rc, errno);
  } else if (op == "fchownat") {  // fchownat DIRH PATH FLAGS: chown to the current owner (a no-op if it works)
    std::string p = arg(2) == "-" ? "" : Path(arg(2));
    Call(line, fchownat(Fd(arg(1)), p.c_str(), getuid(), getgid(), Flags(arg(3))));
  } else if (op == "fchmodat") {  // fchmodat DIRH PATH FLAGS: chmod 0755
    std::string p = arg(2) == "-" ? "" : Path(arg(2));
    Call(line, fchmodat(Fd(arg(1)), p.c_str(), 0755, Flags(arg(3))));
  } else if (op == "linkat") {  // linkat DIRH PATH NEWPATH FLAGS
    std::string p = arg(2) == "-" ? "" : Path(arg(2));
    Call(line, linkat(Fd(arg(1)), p.c_str(), AT_FDCWD, Path(arg(3)).c_str(), Flags(arg(4))));
  } else if (op == "statx_null") {  // statx_null DIRH: statx(fd, NULL, AT_EMPTY_PATH) (Linux 6.11+)
    struct statx sx;
    const char* volatile no_path = nullptr;  // volatile: glibc declares the path __nonnull
    int rc = statx(Fd(arg(1)), no_path, AT_EMPTY_PATH, STATX_BASIC_STATS, &sx);
    int e = errno;
    // Kernels before 6.11 answer EFAULT; print that as success-equivalent so the test is kernel-neutral.
    Report(line, rc == 0 || e == EFAULT ? 0 : rc, e, rc == 0 ? "type=" + std::to_string(sx.stx_mode & S_IFMT) : "");
  } else if (op == "fmode") {  // fmode H: fstat's mode only (no mtime: safe for checked-in outputs)
    int rc = fstat(Fd(arg(1)), &st);
    char b[32];
    snprintf(b, sizeof b, "mode=%o", st.st_mode);
    Report(line, rc, errno, rc == 0 ? b : "");
  } else if (op == "scandir_cb") {  // scandir_cb PATH: filter/compar that stat and open (see ScanFilter)
    g_scan_dir = Path(arg(1));
    g_scan_stat_ok = 0;
    g_scan_fds.clear();
    struct dirent** list = nullptr;
    int n = scandir(g_scan_dir.c_str(), &list, ScanFilter, ScanCompar);
    int e = errno;
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) {
      names.push_back(list[i]->d_name);
      free(list[i]);
    }
    free(list);
    int closed = 0;
    for (int fd : g_scan_fds) closed += close(fd) == 0;
    Report(line, n, e, Joined(names, false) + " stat_ok=" + std::to_string(g_scan_stat_ok) +
                           " opened=" + std::to_string(g_scan_fds.size()) + " closed=" + std::to_string(closed));
  } else if (op == "glob") {  // glob PATTERN [FLAGS]
    glob_t g;
    int rc = glob(Path(arg(1)).c_str(), a.size() > 2 ? Flags(arg(2)) : 0, nullptr, &g);
    std::vector<std::string> m;
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) m.push_back(Unroot(g.gl_pathv[i]));
    if (rc == 0) globfree(&g);
    Report(line, rc, 0, Joined(m, false));
  } else if (op == "nftw") {  // nftw PATH FLAGS [STOP_AT]
    g_walk.clear();
    g_walk_stop_at = a.size() > 3 ? std::stoi(arg(3)) : 0;
    int fl = Flags(arg(2));
    g_walk_cwd = (fl & FTW_CHDIR) != 0;
    char before[PATH_MAX];
    if (getcwd(before, sizeof before) == nullptr) before[0] = 0;
    int rc = nftw(Path(arg(1)).c_str(), WalkCb, 4, fl);
    int e = errno;
    char after[PATH_MAX];
    if (getcwd(after, sizeof after) == nullptr) after[0] = 0;
    // A stopped walk's visits depend on directory order: report only how many there were.
    std::string out = g_walk_stop_at ? "visits=" + std::to_string(g_walk.size()) : Joined(g_walk, true);
    Report(line, rc, e, out + (strcmp(before, after) ? " cwd-changed" : ""));
  } else if (op == "ftw") {  // ftw PATH
    g_walk.clear();
    int rc = ftw(Path(arg(1)).c_str(), FtwCb, 4);
    Report(line, rc, errno, Joined(g_walk, true));
  } else if (op == "dup") {  // dup NEWH H
    int fd = dup(Fd(arg(2)));
    if (fd >= 0) g_fds[arg(1)] = fd;
    Report(line, fd < 0 ? -1 : 0, errno);
  } else if (op == "dup2") {  // dup2 NEWH H NUMBER
    int fd = dup2(Fd(arg(2)), std::stoi(arg(3)));
    if (fd >= 0) g_fds[arg(1)] = fd;
    Report(line, fd < 0 ? -1 : 0, errno);
  } else if (op == "dupfd_cloexec") {  // dupfd_cloexec NEWH H
    int fd = fcntl(Fd(arg(2)), F_DUPFD_CLOEXEC, 0);
    if (fd >= 0) g_fds[arg(1)] = fd;
    Report(line, fd < 0 ? -1 : 0, errno, fd >= 0 ? "cloexec=" + std::to_string(fcntl(fd, F_GETFD) & FD_CLOEXEC) : "");
  } else if (op == "getfl") {
    int fl = fcntl(Fd(arg(1)), F_GETFL);
    Report(line, fl < 0 ? -1 : (fl & O_ACCMODE), errno);
  } else if (op == "mmap") {  // mmap H LEN: hash of the mapping
    size_t len = std::stoul(arg(2));
    void* p = mmap(nullptr, len, PROT_READ, MAP_PRIVATE, Fd(arg(1)), 0);
    if (p == MAP_FAILED) {
      Report(line, -1, errno);
    } else {
      char h[32];
      snprintf(h, sizeof h, "hash=%016llx", static_cast<unsigned long long>(Hash(static_cast<char*>(p), len)));
      munmap(p, len);
      Report(line, 0, 0, h);
    }
  } else if (op == "fdopen_read") {  // fdopen_read H: fdopen + fread to EOF + fclose (closes H)
    FILE* f = fdopen(Fd(arg(1)), "rb");
    if (!f) {
      Report(line, -1, errno);
      return;
    }
    char buf[4096];
    uint64_t h = 1469598103934665603ull;
    long total = 0;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
      h = Hash(buf, n, h);
      total += static_cast<long>(n);
    }
    fclose(f);
    g_fds.erase(arg(1));
    char o[48];
    snprintf(o, sizeof o, "hash=%016llx", static_cast<unsigned long long>(h));
    Report(line, total, 0, o);
  } else if (op == "fopen") {  // fopen PATH MODE: fread to EOF
    FILE* f = fopen(Path(arg(1)).c_str(), arg(2).c_str());
    if (!f) {
      Report(line, -1, errno);
      return;
    }
    char buf[4096];
    uint64_t h = 1469598103934665603ull;
    long total = 0;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
      h = Hash(buf, n, h);
      total += static_cast<long>(n);
    }
    fclose(f);
    char o[48];
    snprintf(o, sizeof o, "hash=%016llx", static_cast<unsigned long long>(h));
    Report(line, total, 0, o);
  } else if (op == "fork_read") {  // fork_read H: a forked child lseeks to 0 and reads the inherited fd
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      lseek(Fd(arg(1)), 0, SEEK_SET);
      long total;
      std::string h = ReadAllHash(Fd(arg(1)), &total);
      struct stat cs;
      int rc = fstat(Fd(arg(1)), &cs);
      Report(line + " [child]", total, errno, h + " fstat=" + std::to_string(rc) + " " + Stat(cs));
      fflush(stdout);
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    Report(line, WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
  } else if (op == "exec_read" || op == "exec_getcwd") {
    // exec_read H: an exec'd child (this program again) reads the inherited fd from offset 0.
    // exec_getcwd: an exec'd child prints its cwd (the virtual cwd travels as FANSTORE_CWD).
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      std::string fd = op == "exec_read" ? std::to_string(Fd(arg(1))) : "-";
      if (op == "exec_read") fcntl(Fd(arg(1)), F_SETFD, 0);
      execl("/proc/self/exe", "fsio", "--child", op.c_str(), fd.c_str(), g_root.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    Report(line, WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
  } else if (op == "opendir") {  // opendir D PATH
    DIR* d = opendir(Path(arg(2)).c_str());
    int e = errno;
    if (d) g_dirs[arg(1)] = d;
    Report(line, d ? 0 : -1, e);
  } else if (op == "fdopendir") {  // fdopendir D H
    DIR* d = fdopendir(Fd(arg(2)));
    int e = errno;
    if (d) g_dirs[arg(1)] = d;
    Report(line, d ? 0 : -1, e);
  } else if (op == "readdir") {  // readdir D: the whole listing, sorted (file systems order differently)
    std::string l = Listing(g_dirs.at(arg(1)));
    Report(line, errno ? -1 : 0, errno, l);
  } else if (op == "rewinddir") {
    rewinddir(g_dirs.at(arg(1)));
    Report(line, 0, 0);
  } else if (op == "telldir_seekdir") {  // reads one entry, remembers, reads the rest, seeks back, reads again
    DIR* d = g_dirs.at(arg(1));
    rewinddir(d);
    readdir(d);
    long pos = telldir(d);
    struct dirent* e1 = readdir(d);
    std::string first = e1 ? e1->d_name : "";
    while (readdir(d)) {
    }
    seekdir(d, pos);
    struct dirent* e2 = readdir(d);
    Report(line, 0, 0, std::string("same=") + ((e2 ? e2->d_name : "") == first ? "1" : "0"));
  } else if (op == "dirfd_fstat") {
    int fd = dirfd(g_dirs.at(arg(1)));
    int rc = fstat(fd, &st);
    Report(line, rc, errno, rc == 0 ? Stat(st) : "");
  } else if (op == "closedir") {
    int rc = closedir(g_dirs.at(arg(1)));
    g_dirs.erase(arg(1));
    Report(line, rc, errno);
  } else if (op == "scandir") {
    struct dirent** list = nullptr;
    int n = scandir(Path(arg(1)).c_str(), &list, nullptr, alphasort);
    int e = errno;
    std::string names;
    for (int i = 0; i < n; ++i) {
      names += std::string(list[i]->d_name) + " ";
      free(list[i]);
    }
    free(list);
    Report(line, n, e, "[" + names + "]");
  } else if (op == "chdir") {
    int rc = chdir(Path(arg(1)).c_str());
    Report(line, rc, errno);
  } else if (op == "fchdir") {
    int rc = fchdir(Fd(arg(1)));
    Report(line, rc, errno);
  } else if (op == "getcwd") {
    char buf[PATH_MAX];
    char* p = getcwd(buf, sizeof buf);
    Report(line, p ? 0 : -1, errno, p ? Unroot(p) : "");
  } else if (op == "realpath") {
    char buf[PATH_MAX];
    char* p = realpath(Path(arg(1)).c_str(), buf);
    Report(line, p ? 0 : -1, errno, p ? Unroot(p) : "");
  } else if (op == "readlink") {
    char buf[PATH_MAX];
    ssize_t n = readlink(Path(arg(1)).c_str(), buf, sizeof buf);
    Report(line, n, errno);
  } else if (op == "getxattr") {
    char buf[256];
    ssize_t n = getxattr(Path(arg(1)).c_str(), arg(2).c_str(), buf, sizeof buf);
    Report(line, n, errno);
  } else if (op == "mkdir") {
    Call(line, mkdir(Path(arg(1)).c_str(), 0755));
  } else if (op == "rmdir") {
    Call(line, rmdir(Path(arg(1)).c_str()));
  } else if (op == "unlink") {
    Call(line, unlink(Path(arg(1)).c_str()));
  } else if (op == "rename") {
    Call(line, rename(Path(arg(1)).c_str(), Path(arg(2)).c_str()));
  } else if (op == "link") {
    Call(line, link(Path(arg(1)).c_str(), Path(arg(2)).c_str()));
  } else if (op == "symlink") {
    Call(line, symlink(arg(1).c_str(), Path(arg(2)).c_str()));
  } else if (op == "truncate") {
    Call(line, truncate(Path(arg(1)).c_str(), 0));
  } else if (op == "chmod") {
    Call(line, chmod(Path(arg(1)).c_str(), 0600));
  } else if (op == "chown") {
    Call(line, chown(Path(arg(1)).c_str(), 0, 0));
  } else if (op == "utimensat") {
    Call(line, utimensat(AT_FDCWD, Path(arg(1)).c_str(), nullptr, 0));
  } else if (op == "setxattr") {
    Call(line, setxattr(Path(arg(1)).c_str(), "user.x", "1", 1, 0));
  } else if (op == "mkfifo") {
    Call(line, mkfifo(Path(arg(1)).c_str(), 0644));
  } else if (op == "bind_unix" || op == "connect_unix") {  // bind_unix PATH / connect_unix PATH: a Unix socket name
    struct sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string p = Path(arg(1));
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", p.c_str());
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto* sa = reinterpret_cast<struct sockaddr*>(&addr);
    int rc = op == "bind_unix" ? bind(s, sa, sizeof addr) : connect(s, sa, sizeof addr);
    int e = errno;
    close(s);
    Report(line, rc, e);
  } else if (op == "statvfs_ro") {
    struct statvfs sv;
    int rc = statvfs(Path(arg(1)).c_str(), &sv);
    Report(line, rc, errno, rc == 0 ? "rdonly=" + std::to_string((sv.f_flag & ST_RDONLY) != 0) : "");
  } else if (op == "stat_t" || op == "fstatat_t") {  // stat_t PATH / fstatat_t DIRH PATH FLAGS: type, mode, size
    int rc = op == "stat_t" ? stat(Path(arg(1)).c_str(), &st)
                            : fstatat(Fd(arg(1)), Path(arg(2)).c_str(), &st, Flags(arg(3)));
    int e = errno;
    char b[64];
    snprintf(b, sizeof b, "mode=%o size=%lld", st.st_mode, S_ISDIR(st.st_mode) ? 0LL : static_cast<long long>(st.st_size));
    Report(line, rc, e, rc == 0 ? b : "");
  } else if (op == "reopen") {  // reopen NEWH H FLAGS: open("/proc/self/fd/<H>", FLAGS)
    std::string p = "/proc/self/fd/" + std::to_string(Fd(arg(2)));
    int fd = open(p.c_str(), Flags(arg(3)), 0644);
    int e = errno;
    if (fd >= 0) g_fds[arg(1)] = fd;
    Report(line, fd < 0 ? -1 : 0, e);
  } else if (op == "readlink_fd") {  // readlink_fd H: where /proc/self/fd/<H> leads
    char buf[PATH_MAX];
    std::string p = "/proc/self/fd/" + std::to_string(Fd(arg(1)));
    ssize_t n = readlink(p.c_str(), buf, sizeof buf - 1);
    int e = errno;
    Report(line, n < 0 ? -1 : 0, e, n > 0 ? Unroot(std::string(buf, static_cast<size_t>(n))) : "");
  } else if (op == "lstat_fd") {  // lstat_fd H: /proc/self/fd/<H> is a link (lstat, fstatat and statx
    // without following) to the file (stat): what realpath implementations walking with lstat rely on
    std::string p = "/proc/self/fd/" + std::to_string(Fd(arg(1)));
    struct stat l, f;
    struct statx x;
    int rl = lstat(p.c_str(), &l), ra = fstatat(AT_FDCWD, p.c_str(), &f, AT_SYMLINK_NOFOLLOW);
    int rx = statx(AT_FDCWD, p.c_str(), AT_SYMLINK_NOFOLLOW, STATX_TYPE, &x);
    bool links = rl == 0 && S_ISLNK(l.st_mode) && ra == 0 && S_ISLNK(f.st_mode) && rx == 0 && S_ISLNK(x.stx_mode);
    int rs = stat(p.c_str(), &f);
    char b[96];
    snprintf(b, sizeof b, "nofollow_is_link=%d follow_mode=%o size=%lld", links, rs == 0 ? f.st_mode : 0u,
             rs == 0 ? static_cast<long long>(f.st_size) : -1LL);
    Report(line, rl, errno, b);
  } else if (op == "mkstemp" || op == "mkostemp" || op == "mkdtemp") {  // mkstemp TEMPLATE [SUFFIXLEN]
    std::string t = Path(arg(1));
    int suffix = a.size() > 2 ? std::stoi(arg(2)) : 0;
    long rc;
    if (op == "mkdtemp") {
      rc = mkdtemp(t.data()) ? 0 : -1;
    } else if (op == "mkostemp") {
      rc = mkostemps(t.data(), suffix, O_CLOEXEC);
    } else {
      rc = mkstemps(t.data(), suffix);
    }
    int e = errno;
    // The name glibc tried: its six random characters (and whether they were filled in at all).
    bool filled = t.find("XXXXXX") == std::string::npos;
    Report(line, rc < 0 ? -1 : 0, e, std::string("filled=") + (filled ? "1" : "0"));
  } else if (op == "readdir_has") {  // readdir_has D NAME: whether the stream lists NAME, and its d_type
    DIR* d = g_dirs.at(arg(1));
    rewinddir(d);
    std::string name = Path(arg(2)), found = "missing";
    errno = 0;
    while (struct dirent* e = readdir(d))
      if (name == e->d_name) found = "found type=" + std::to_string(e->d_type) + " ino_set=" + std::to_string(e->d_ino != 0);
    Report(line, errno ? -1 : 0, errno, found);
  } else if (op == "scandir_has") {  // scandir_has PATH NAME
    struct dirent** list = nullptr;
    int n = scandir(Path(arg(1)).c_str(), &list, nullptr, alphasort);
    int e = errno;
    std::string name = Path(arg(2)), found = "missing";
    for (int i = 0; i < n; ++i) {
      if (name == list[i]->d_name) found = "found type=" + std::to_string(list[i]->d_type);
      free(list[i]);
    }
    free(list);
    Report(line, n < 0 ? -1 : 0, e, found);
  } else if (op == "glob_under") {  // glob_under PATTERN: the matches under ROOT only (the parent holds more)
    glob_t g;
    int rc = glob(Path(arg(1)).c_str(), 0, nullptr, &g);
    std::vector<std::string> m;
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i)
        if (Unroot(g.gl_pathv[i]) != g.gl_pathv[i]) m.push_back(Unroot(g.gl_pathv[i]));
      globfree(&g);
    }
    Report(line, rc == GLOB_NOMATCH ? 0 : rc, 0, Joined(m, true));
  } else if (op == "fts") {  // fts PATH FLAGS: every visit as "path:info:level" (sorted), and the end errno
    std::string root = Path(arg(1));
    char* roots[] = {root.data(), nullptr};
    FTS* f = fts_open(roots, Flags(arg(2)), nullptr);
    if (f == nullptr) {
      Report(line, -1, errno);
      return;
    }
    std::vector<std::string> v;
    errno = 0;
    const bool nostat = (Flags(arg(2)) & FTS_NOSTAT) != 0;
    while (FTSENT* e = fts_read(f)) {
      // With FTS_NOSTAT glibc leaves fts_statp undefined: only the type is reported.
      std::string size = (e->fts_info == FTS_F && !nostat) ? ":size=" + std::to_string(e->fts_statp->st_size) : "";
      v.push_back(Unroot(e->fts_path) + ":" + std::to_string(e->fts_info) + ":" + std::to_string(e->fts_level) + size);
    }
    int e = errno;
    fts_close(f);
    Report(line, e ? -1 : 0, e, Joined(v, true));
  } else if (op == "fts_children_has") {  // fts_children_has PATH NAME: NAME among the root's children
    std::string root = Path(arg(1));
    char* roots[] = {root.data(), nullptr};
    FTS* f = fts_open(roots, FTS_PHYSICAL, nullptr);
    if (f == nullptr) {
      Report(line, -1, errno);
      return;
    }
    FTSENT* r = fts_read(f);
    std::string name = Path(arg(2)), found = "missing";
    for (FTSENT* c = r ? fts_children(f, 0) : nullptr; c != nullptr; c = c->fts_link)
      if (name == c->fts_name) found = "found info=" + std::to_string(c->fts_info);
    fts_close(f);
    Report(line, r ? 0 : -1, r ? 0 : errno, found);
  } else if (op == "errno_kept") {  // a successful stat must leave errno alone
    errno = EXDEV;
    int rc = stat(Path(arg(1)).c_str(), &st);
    Report(line, rc, 0, std::string("errno_after=") + (strerrorname_np(errno) ? strerrorname_np(errno) : "0"));
  } else {
    std::cerr << "fsio: unknown op " << op << "\n";
    exit(2);
  }
}

}  // namespace

// The exec'd half of exec_read / exec_getcwd.
int Child(const std::string& op, const std::string& fd_arg) {
  if (op == "exec_read") {
    int fd = std::stoi(fd_arg);
    lseek(fd, 0, SEEK_SET);
    long total;
    std::string h = ReadAllHash(fd, &total);
    Report("  exec_read [exec'd child]", total, errno, h);
  } else {
    char buf[PATH_MAX];
    char* p = getcwd(buf, sizeof buf);
    Report("  exec_getcwd [exec'd child]", p ? 0 : -1, errno, p ? Unroot(p) : "");
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--child") {
    g_root = argv[4];
    return Child(argv[2], argv[3]);
  }
  if (argc != 2) {
    std::cerr << "usage: fsio ROOT < script\n";
    return 2;
  }
  g_root = argv[1];
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::cout << line << "\n";
      continue;
    }
    Run(line);
    std::cout.flush();
  }
  return 0;
}
