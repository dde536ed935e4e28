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
#include <string_view>
#include <unordered_map>
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
  static const std::map<std::string, int> kFlags = {{"O_RDONLY", O_RDONLY},
                                                    {"O_WRONLY", O_WRONLY},
                                                    {"O_RDWR", O_RDWR},
                                                    {"O_CREAT", O_CREAT},
                                                    {"O_TRUNC", O_TRUNC},
                                                    {"O_EXCL", O_EXCL},
                                                    {"O_APPEND", O_APPEND},
                                                    {"O_DIRECTORY", O_DIRECTORY},
                                                    {"O_CLOEXEC", O_CLOEXEC},
                                                    {"O_NOFOLLOW", O_NOFOLLOW},
                                                    {"O_PATH", O_PATH},
                                                    {"O_TMPFILE", O_TMPFILE},
                                                    {"AT_EMPTY_PATH", AT_EMPTY_PATH},
                                                    {"AT_SYMLINK_NOFOLLOW", AT_SYMLINK_NOFOLLOW},
                                                    {"AT_EACCESS", AT_EACCESS},
                                                    {"FTW_PHYS", FTW_PHYS},
                                                    {"FTW_DEPTH", FTW_DEPTH},
                                                    {"FTW_MOUNT", FTW_MOUNT},
                                                    {"FTW_CHDIR", FTW_CHDIR},
                                                    {"FTS_PHYSICAL", FTS_PHYSICAL},
                                                    {"FTS_LOGICAL", FTS_LOGICAL},
                                                    {"FTS_NOSTAT", FTS_NOSTAT},
                                                    {"FTS_SEEDOT", FTS_SEEDOT},
                                                    {"FTS_XDEV", FTS_XDEV},
                                                    {"FTS_NOCHDIR", FTS_NOCHDIR},
                                                    {"GLOB_MARK", GLOB_MARK},
                                                    {"GLOB_ONLYDIR", GLOB_ONLYDIR},
                                                    {"GLOB_NOCHECK", GLOB_NOCHECK},
                                                    {"F_OK", F_OK},
                                                    {"R_OK", R_OK},
                                                    {"W_OK", W_OK},
                                                    {"X_OK", X_OK},
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

// fread to EOF, then fclose: "hash=..." of what was read, *total its length.
std::string StreamHash(FILE* f, long* total) {
  char buf[4096];
  uint64_t h = 1469598103934665603ull;
  size_t n;
  *total = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    h = Hash(buf, n, h);
    *total += static_cast<long>(n);
  }
  fclose(f);
  char o[48];
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
  struct stat sa {
  }, sb{};
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
  std::string t = type == FTW_F     ? "F"
                  : type == FTW_D   ? "D"
                  : type == FTW_DP  ? "DP"
                  : type == FTW_NS  ? "NS"
                  : type == FTW_DNR ? "DNR"
                                    : "SL";
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

// One script line split into words: words[0] is the op, the rest are its arguments, and `line` is echoed in front
// of every result.
struct Args {
  const std::vector<std::string>& words;
  const std::string& line;
  const std::string& op() const { return words[0]; }
  size_t size() const { return words.size(); }
  // A line too short for its op is a broken script, not a result to compare: say which line and stop.
  const std::string& arg(size_t i) const {
    if (i >= words.size()) {
      std::cerr << "fsio: missing argument " << i << " in: " << line << "\n";
      exit(2);
    }
    return words[i];
  }
};
using Op = void (*)(const Args& a);

// The ops that run one of two or three calls on the same arguments share a handler, which tells them apart by
// a.op(); they are entered under each of their names in kOps below.

// exec_read H: an exec'd child (this program again) reads the inherited fd from offset 0.
// exec_getcwd: an exec'd child prints its cwd (the virtual cwd travels as FANSTORE_CWD).
void ExecChild(const Args& a) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    std::string fd = a.op() == "exec_read" ? std::to_string(Fd(a.arg(1))) : "-";
    if (a.op() == "exec_read") fcntl(Fd(a.arg(1)), F_SETFD, 0);
    execl("/proc/self/exe", "fsio", "--child", a.op().c_str(), fd.c_str(), g_root.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Report(a.line, WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
}

// bind_unix PATH / connect_unix PATH: a Unix socket name
void UnixSocket(const Args& a) {
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::string p = Path(a.arg(1));
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", p.c_str());
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto* sa = reinterpret_cast<struct sockaddr*>(&addr);
  int rc = a.op() == "bind_unix" ? bind(s, sa, sizeof addr) : connect(s, sa, sizeof addr);
  int e = errno;
  close(s);
  Report(a.line, rc, e);
}

// execv PATH / fexecve H: the program runs in a forked child with stdio on /dev/null; the result is the exec's
// errno, or the program's exit status (a script whose interpreter cannot read it fails there).
void RunChild(const Args& a) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    Report(a.line, -1, errno);
    return;
  }
  int fd = a.op() == "fexecve" ? Fd(a.arg(1)) : -1;
  std::string path = a.op() == "fexecve" ? "" : Path(a.arg(1));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    char* argv[] = {const_cast<char*>("prog"), nullptr};
    if (fd >= 0) {
      fexecve(fd, argv, environ);
    } else {
      execv(path.c_str(), argv);
    }
    int e = errno;
    if (write(pipefd[1], &e, sizeof e) != sizeof e) _exit(126);
    _exit(127);
  }
  close(pipefd[1]);
  int e = 0;
  ssize_t got = read(pipefd[0], &e, sizeof e);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got == sizeof e) {
    Report(a.line, -1, e);
  } else {
    Report(a.line, 0, 0, "status=" + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  }
}

// stat_t PATH / fstatat_t DIRH PATH FLAGS: type, mode, size
void StatType(const Args& a) {
  struct stat st;
  int rc = a.op() == "stat_t" ? stat(Path(a.arg(1)).c_str(), &st)
                              : fstatat(Fd(a.arg(1)), Path(a.arg(2)).c_str(), &st, Flags(a.arg(3)));
  int e = errno;
  char b[64];
  snprintf(b, sizeof b, "mode=%o size=%lld", st.st_mode,
           S_ISDIR(st.st_mode) ? 0LL : static_cast<long long>(st.st_size));
  Report(a.line, rc, e, rc == 0 ? b : "");
}

// mkstemp TEMPLATE [SUFFIXLEN] (and mkostemp, with O_CLOEXEC; mkdtemp TEMPLATE)
void MakeTemp(const Args& a) {
  std::string t = Path(a.arg(1));
  int suffix = a.size() > 2 ? std::stoi(a.arg(2)) : 0;
  long rc;
  if (a.op() == "mkdtemp") {
    rc = mkdtemp(t.data()) ? 0 : -1;
  } else if (a.op() == "mkostemp") {
    rc = mkostemps(t.data(), suffix, O_CLOEXEC);
  } else {
    rc = mkstemps(t.data(), suffix);
  }
  int e = errno;
  // The name glibc tried: its six random characters (and whether they were filled in at all).
  bool filled = t.find("XXXXXX") == std::string::npos;
  Report(a.line, rc < 0 ? -1 : 0, e, std::string("filled=") + (filled ? "1" : "0"));
}

// Every op by name. A handler reports the errno of its own call: where anything else may run between that call
// and the Report, it saves errno right after the call (into `e`, or through Call). Run sets errno to 0 first.
const std::unordered_map<std::string_view, Op> kOps = {
    // --- opening and reading files
    {"open",
     [](const Args& a) {  // open H PATH FLAGS
       int fd = open(Path(a.arg(2)).c_str(), Flags(a.arg(3)), 0644);
       int e = errno;
       if (fd >= 0) g_fds[a.arg(1)] = fd;
       Report(a.line, fd < 0 ? -1 : 0, e);
     }},
    {"openat",
     [](const Args& a) {  // openat H DIRH PATH FLAGS
       int fd = openat(Fd(a.arg(2)), Path(a.arg(3)).c_str(), Flags(a.arg(4)), 0644);
       int e = errno;
       if (fd >= 0) g_fds[a.arg(1)] = fd;
       Report(a.line, fd < 0 ? -1 : 0, e);
     }},
    {"creat",
     [](const Args& a) {  // creat PATH
       int fd = creat(Path(a.arg(1)).c_str(), 0644);
       Report(a.line, fd < 0 ? -1 : 0, errno);
     }},
    {"close",
     [](const Args& a) {  // close H
       int rc = close(Fd(a.arg(1)));
       Report(a.line, rc, errno);
     }},
    {"readall",
     [](const Args& a) {  // readall H
       long total;
       std::string h = ReadAllHash(Fd(a.arg(1)), &total);
       Report(a.line, total, errno, h);
     }},
    {"read",
     [](const Args& a) {  // read H N: prints the bytes when printable
       std::string buf(std::stoul(a.arg(2)), '\0');
       ssize_t n = read(Fd(a.arg(1)), buf.data(), buf.size());
       int e = errno;
       char h[32];
       snprintf(h, sizeof h, "hash=%016llx", static_cast<unsigned long long>(Hash(buf.data(), n > 0 ? n : 0)));
       Report(a.line, n, e, h);
     }},
    {"pread",
     [](const Args& a) {  // pread H N OFF
       std::string buf(std::stoul(a.arg(2)), '\0');
       ssize_t n = pread(Fd(a.arg(1)), buf.data(), buf.size(), std::stol(a.arg(3)));
       int e = errno;
       char h[32];
       snprintf(h, sizeof h, "hash=%016llx", static_cast<unsigned long long>(Hash(buf.data(), n > 0 ? n : 0)));
       Report(a.line, n, e, h);
     }},
    {"lseek",
     [](const Args& a) {  // lseek H OFF SET|CUR|END
       int wh = a.arg(3) == "SET" ? SEEK_SET : a.arg(3) == "CUR" ? SEEK_CUR : SEEK_END;
       off_t r = lseek(Fd(a.arg(1)), std::stol(a.arg(2)), wh);
       Report(a.line, r, errno);
     }},
    // --- stat and access
    {"stat",
     [](const Args& a) {  // stat PATH
       struct stat st;
       int rc = stat(Path(a.arg(1)).c_str(), &st);
       Report(a.line, rc, errno, rc == 0 ? Stat(st) : "");
     }},
    {"lstat",
     [](const Args& a) {  // lstat PATH
       struct stat st;
       int rc = lstat(Path(a.arg(1)).c_str(), &st);
       Report(a.line, rc, errno, rc == 0 ? Stat(st) : "");
     }},
    {"fstat",
     [](const Args& a) {  // fstat H
       struct stat st;
       int rc = fstat(Fd(a.arg(1)), &st);
       Report(a.line, rc, errno, rc == 0 ? Stat(st) : "");
     }},
    {"fstatat",
     [](const Args& a) {  // fstatat DIRH PATH FLAGS ("" path: write -)
       struct stat st;
       std::string p = a.arg(2) == "-" ? "" : Path(a.arg(2));
       int rc = fstatat(Fd(a.arg(1)), p.c_str(), &st, Flags(a.arg(3)));
       Report(a.line, rc, errno, rc == 0 ? Stat(st) : "");
     }},
    {"statx",
     [](const Args& a) {  // statx DIRH PATH FLAGS
       std::string p = a.arg(2) == "-" ? "" : Path(a.arg(2));
       struct statx sx;
       int rc = statx(Fd(a.arg(1)), p.c_str(), Flags(a.arg(3)), STATX_BASIC_STATS, &sx);
       char b[160] = "";
       if (rc == 0)
         snprintf(b, sizeof b, "mode=%o size=%llu mtime=%lld", sx.stx_mode,
                  S_ISDIR(sx.stx_mode) ? 0ULL : static_cast<unsigned long long>(sx.stx_size),
                  static_cast<long long>(sx.stx_mtime.tv_sec));
       Report(a.line, rc, errno, b);
     }},
    {"access",
     [](const Args& a) {  // access PATH MODE
       int rc = access(Path(a.arg(1)).c_str(), Flags(a.arg(2)));
       Report(a.line, rc, errno);
     }},
    {"euidaccess",
     [](const Args& a) {  // euidaccess PATH MODE
       int rc = euidaccess(Path(a.arg(1)).c_str(), Flags(a.arg(2)));
       Report(a.line, rc, errno);
     }},
    {"seteuid",
     [](const Args& a) {  // seteuid UID: the effective uid only (access then checks the real one, AT_EACCESS this)
       Call(a.line,
            setresuid(static_cast<uid_t>(-1), static_cast<uid_t>(std::stoul(a.arg(1))), static_cast<uid_t>(-1)));
     }},
    {"faccessat",
     [](const Args& a) {  // faccessat DIRH PATH MODE [FLAGS] ("" path: write -)
       std::string p = a.arg(2) == "-" ? "" : Path(a.arg(2));
       int rc = faccessat(Fd(a.arg(1)), p.c_str(), Flags(a.arg(3)), a.size() > 4 ? Flags(a.arg(4)) : 0);
       Report(a.line, rc, errno);
     }},
    {"fchownat",
     [](const Args& a) {  // fchownat DIRH PATH FLAGS: chown to the current owner (a no-op if it works)
       std::string p = a.arg(2) == "-" ? "" : Path(a.arg(2));
       Call(a.line, fchownat(Fd(a.arg(1)), p.c_str(), getuid(), getgid(), Flags(a.arg(3))));
     }},
    {"fchmodat",
     [](const Args& a) {  // fchmodat DIRH PATH FLAGS: chmod 0755
       std::string p = a.arg(2) == "-" ? "" : Path(a.arg(2));
       Call(a.line, fchmodat(Fd(a.arg(1)), p.c_str(), 0755, Flags(a.arg(3))));
     }},
    {"linkat",
     [](const Args& a) {  // linkat DIRH PATH NEWPATH FLAGS
       std::string p = a.arg(2) == "-" ? "" : Path(a.arg(2));
       Call(a.line, linkat(Fd(a.arg(1)), p.c_str(), AT_FDCWD, Path(a.arg(3)).c_str(), Flags(a.arg(4))));
     }},
    {"statx_null",
     [](const Args& a) {  // statx_null DIRH: statx(fd, NULL, AT_EMPTY_PATH) (Linux 6.11+)
       struct statx sx;
       const char* volatile no_path = nullptr;  // volatile: glibc declares the path __nonnull
       int rc = statx(Fd(a.arg(1)), no_path, AT_EMPTY_PATH, STATX_BASIC_STATS, &sx);
       int e = errno;
       // Kernels before 6.11 answer EFAULT; print that as success-equivalent so the test is kernel-neutral.
       Report(a.line, rc == 0 || e == EFAULT ? 0 : rc, e,
              rc == 0 ? "type=" + std::to_string(sx.stx_mode & S_IFMT) : "");
     }},
    {"fmode",
     [](const Args& a) {  // fmode H: fstat's mode only (no mtime: safe for checked-in outputs)
       struct stat st;
       int rc = fstat(Fd(a.arg(1)), &st);
       char b[32];
       snprintf(b, sizeof b, "mode=%o", st.st_mode);
       Report(a.line, rc, errno, rc == 0 ? b : "");
     }},
    // --- tree walks
    {"scandir_cb",
     [](const Args& a) {  // scandir_cb PATH: filter/compar that stat and open (see ScanFilter)
       g_scan_dir = Path(a.arg(1));
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
       Report(a.line, n, e,
              Joined(names, false) + " stat_ok=" + std::to_string(g_scan_stat_ok) +
                  " opened=" + std::to_string(g_scan_fds.size()) + " closed=" + std::to_string(closed));
     }},
    {"glob",
     [](const Args& a) {  // glob PATTERN [FLAGS]
       glob_t g;
       int rc = glob(Path(a.arg(1)).c_str(), a.size() > 2 ? Flags(a.arg(2)) : 0, nullptr, &g);
       std::vector<std::string> m;
       if (rc == 0)
         for (size_t i = 0; i < g.gl_pathc; ++i) m.push_back(Unroot(g.gl_pathv[i]));
       if (rc == 0) globfree(&g);
       Report(a.line, rc, 0, Joined(m, false));
     }},
    {"nftw",
     [](const Args& a) {  // nftw PATH FLAGS [STOP_AT]
       g_walk.clear();
       g_walk_stop_at = a.size() > 3 ? std::stoi(a.arg(3)) : 0;
       int fl = Flags(a.arg(2));
       g_walk_cwd = (fl & FTW_CHDIR) != 0;
       char before[PATH_MAX];
       if (getcwd(before, sizeof before) == nullptr) before[0] = 0;
       int rc = nftw(Path(a.arg(1)).c_str(), WalkCb, 4, fl);
       int e = errno;
       char after[PATH_MAX];
       if (getcwd(after, sizeof after) == nullptr) after[0] = 0;
       // A stopped walk's visits depend on directory order: report only how many there were.
       std::string out = g_walk_stop_at ? "visits=" + std::to_string(g_walk.size()) : Joined(g_walk, true);
       Report(a.line, rc, e, out + (strcmp(before, after) ? " cwd-changed" : ""));
     }},
    {"ftw",
     [](const Args& a) {  // ftw PATH
       g_walk.clear();
       int rc = ftw(Path(a.arg(1)).c_str(), FtwCb, 4);
       Report(a.line, rc, errno, Joined(g_walk, true));
     }},
    // --- fd semantics: duplicates, mappings, stdio, children
    {"dup",
     [](const Args& a) {  // dup NEWH H
       int fd = dup(Fd(a.arg(2)));
       if (fd >= 0) g_fds[a.arg(1)] = fd;
       Report(a.line, fd < 0 ? -1 : 0, errno);
     }},
    {"dup2",
     [](const Args& a) {  // dup2 NEWH H NUMBER
       int fd = dup2(Fd(a.arg(2)), std::stoi(a.arg(3)));
       if (fd >= 0) g_fds[a.arg(1)] = fd;
       Report(a.line, fd < 0 ? -1 : 0, errno);
     }},
    {"dupfd_cloexec",
     [](const Args& a) {  // dupfd_cloexec NEWH H
       int fd = fcntl(Fd(a.arg(2)), F_DUPFD_CLOEXEC, 0);
       if (fd >= 0) g_fds[a.arg(1)] = fd;
       Report(a.line, fd < 0 ? -1 : 0, errno,
              fd >= 0 ? "cloexec=" + std::to_string(fcntl(fd, F_GETFD) & FD_CLOEXEC) : "");
     }},
    {"getfl",
     [](const Args& a) {  // getfl H: the access mode only
       int fl = fcntl(Fd(a.arg(1)), F_GETFL);
       Report(a.line, fl < 0 ? -1 : (fl & O_ACCMODE), errno);
     }},
    {"mmap",
     [](const Args& a) {  // mmap H LEN: hash of the mapping
       size_t len = std::stoul(a.arg(2));
       void* p = mmap(nullptr, len, PROT_READ, MAP_PRIVATE, Fd(a.arg(1)), 0);
       if (p == MAP_FAILED) {
         Report(a.line, -1, errno);
       } else {
         char h[32];
         snprintf(h, sizeof h, "hash=%016llx", static_cast<unsigned long long>(Hash(static_cast<char*>(p), len)));
         munmap(p, len);
         Report(a.line, 0, 0, h);
       }
     }},
    {"fdopen_read",
     [](const Args& a) {  // fdopen_read H: fdopen + fread to EOF + fclose (closes H)
       FILE* f = fdopen(Fd(a.arg(1)), "rb");
       if (!f) {
         Report(a.line, -1, errno);
         return;
       }
       long total = 0;
       std::string h = StreamHash(f, &total);  // closes f
       g_fds.erase(a.arg(1));
       Report(a.line, total, 0, h);
     }},
    {"fopen",
     [](const Args& a) {  // fopen PATH MODE: fread to EOF
       FILE* f = fopen(Path(a.arg(1)).c_str(), a.arg(2).c_str());
       if (!f) {
         Report(a.line, -1, errno);
         return;
       }
       long total = 0;
       std::string h = StreamHash(f, &total);  // closes f
       Report(a.line, total, 0, h);
     }},
    {"fork_read",
     [](const Args& a) {  // fork_read H: a forked child lseeks to 0 and reads the inherited fd
       fflush(stdout);
       pid_t pid = fork();
       if (pid == 0) {
         lseek(Fd(a.arg(1)), 0, SEEK_SET);
         long total;
         std::string h = ReadAllHash(Fd(a.arg(1)), &total);
         struct stat cs;
         int rc = fstat(Fd(a.arg(1)), &cs);
         Report(a.line + " [child]", total, errno, h + " fstat=" + std::to_string(rc) + " " + Stat(cs));
         fflush(stdout);
         _exit(0);
       }
       int status = 0;
       waitpid(pid, &status, 0);
       Report(a.line, WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
     }},
    {"execv", RunChild},         // execv PATH: exec'd in a forked child (stdio on /dev/null)
    {"fexecve", RunChild},       // fexecve H: the same through an fd
    {"exec_read", ExecChild},    // exec_read H
    {"exec_getcwd", ExecChild},  // exec_getcwd
    // --- directory streams
    {"opendir",
     [](const Args& a) {  // opendir D PATH
       DIR* d = opendir(Path(a.arg(2)).c_str());
       int e = errno;
       if (d) g_dirs[a.arg(1)] = d;
       Report(a.line, d ? 0 : -1, e);
     }},
    {"fdopendir",
     [](const Args& a) {  // fdopendir D H
       DIR* d = fdopendir(Fd(a.arg(2)));
       int e = errno;
       if (d) g_dirs[a.arg(1)] = d;
       Report(a.line, d ? 0 : -1, e);
     }},
    {"readdir",
     [](const Args& a) {  // readdir D: the whole listing, sorted (file systems order differently)
       std::string l = Listing(g_dirs.at(a.arg(1)));
       Report(a.line, errno ? -1 : 0, errno, l);
     }},
    {"rewinddir",
     [](const Args& a) {  // rewinddir D
       rewinddir(g_dirs.at(a.arg(1)));
       Report(a.line, 0, 0);
     }},
    {"telldir_seekdir",
     [](const Args& a) {  // reads one entry, remembers, reads the rest, seeks back, reads again
       DIR* d = g_dirs.at(a.arg(1));
       rewinddir(d);
       readdir(d);
       long pos = telldir(d);
       struct dirent* e1 = readdir(d);
       std::string first = e1 ? e1->d_name : "";
       while (readdir(d)) {
       }
       seekdir(d, pos);
       struct dirent* e2 = readdir(d);
       Report(a.line, 0, 0, std::string("same=") + ((e2 ? e2->d_name : "") == first ? "1" : "0"));
     }},
    {"dirfd_fstat",
     [](const Args& a) {  // dirfd_fstat D
       struct stat st;
       int fd = dirfd(g_dirs.at(a.arg(1)));
       int rc = fstat(fd, &st);
       Report(a.line, rc, errno, rc == 0 ? Stat(st) : "");
     }},
    {"closedir",
     [](const Args& a) {  // closedir D
       int rc = closedir(g_dirs.at(a.arg(1)));
       g_dirs.erase(a.arg(1));
       Report(a.line, rc, errno);
     }},
    {"scandir",
     [](const Args& a) {  // scandir PATH
       struct dirent** list = nullptr;
       int n = scandir(Path(a.arg(1)).c_str(), &list, nullptr, alphasort);
       int e = errno;
       std::string names;
       for (int i = 0; i < n; ++i) {
         names += std::string(list[i]->d_name) + " ";
         free(list[i]);
       }
       free(list);
       Report(a.line, n, e, "[" + names + "]");
     }},
    // --- cwd and names
    {"chdir",
     [](const Args& a) {  // chdir PATH
       int rc = chdir(Path(a.arg(1)).c_str());
       Report(a.line, rc, errno);
     }},
    {"fchdir",
     [](const Args& a) {  // fchdir H
       int rc = fchdir(Fd(a.arg(1)));
       Report(a.line, rc, errno);
     }},
    {"getcwd",
     [](const Args& a) {  // getcwd
       char buf[PATH_MAX];
       char* p = getcwd(buf, sizeof buf);
       Report(a.line, p ? 0 : -1, errno, p ? Unroot(p) : "");
     }},
    {"realpath",
     [](const Args& a) {  // realpath PATH
       char buf[PATH_MAX];
       char* p = realpath(Path(a.arg(1)).c_str(), buf);
       Report(a.line, p ? 0 : -1, errno, p ? Unroot(p) : "");
     }},
    {"readlink",
     [](const Args& a) {  // readlink PATH
       char buf[PATH_MAX];
       ssize_t n = readlink(Path(a.arg(1)).c_str(), buf, sizeof buf);
       Report(a.line, n, errno);
     }},
    {"getxattr",
     [](const Args& a) {  // getxattr PATH NAME
       char buf[256];
       ssize_t n = getxattr(Path(a.arg(1)).c_str(), a.arg(2).c_str(), buf, sizeof buf);
       Report(a.line, n, errno);
     }},
    // --- mutations
    {"mkdir",
     [](const Args& a) {  // mkdir PATH (mode 0755)
       Call(a.line, mkdir(Path(a.arg(1)).c_str(), 0755));
     }},
    {"rmdir",
     [](const Args& a) {  // rmdir PATH
       Call(a.line, rmdir(Path(a.arg(1)).c_str()));
     }},
    {"unlink",
     [](const Args& a) {  // unlink PATH
       Call(a.line, unlink(Path(a.arg(1)).c_str()));
     }},
    {"rename",
     [](const Args& a) {  // rename PATH NEWPATH
       Call(a.line, rename(Path(a.arg(1)).c_str(), Path(a.arg(2)).c_str()));
     }},
    {"link",
     [](const Args& a) {  // link PATH NEWPATH
       Call(a.line, link(Path(a.arg(1)).c_str(), Path(a.arg(2)).c_str()));
     }},
    {"symlink",
     [](const Args& a) {  // symlink TARGET PATH (TARGET taken as written)
       Call(a.line, symlink(a.arg(1).c_str(), Path(a.arg(2)).c_str()));
     }},
    {"truncate",
     [](const Args& a) {  // truncate PATH: to size 0
       Call(a.line, truncate(Path(a.arg(1)).c_str(), 0));
     }},
    {"chmod",
     [](const Args& a) {  // chmod PATH: to 0600
       Call(a.line, chmod(Path(a.arg(1)).c_str(), 0600));
     }},
    {"chown",
     [](const Args& a) {  // chown PATH: to uid 0, gid 0
       Call(a.line, chown(Path(a.arg(1)).c_str(), 0, 0));
     }},
    {"utimensat",
     [](const Args& a) {  // utimensat PATH: times to now
       Call(a.line, utimensat(AT_FDCWD, Path(a.arg(1)).c_str(), nullptr, 0));
     }},
    {"setxattr",
     [](const Args& a) {  // setxattr PATH: user.x=1
       Call(a.line, setxattr(Path(a.arg(1)).c_str(), "user.x", "1", 1, 0));
     }},
    {"mkfifo",
     [](const Args& a) {  // mkfifo PATH (mode 0644)
       Call(a.line, mkfifo(Path(a.arg(1)).c_str(), 0644));
     }},
    {"bind_unix", UnixSocket},     // bind_unix PATH
    {"connect_unix", UnixSocket},  // connect_unix PATH
    {"statvfs_ro",
     [](const Args& a) {  // statvfs_ro PATH: whether the file system is read-only
       struct statvfs sv;
       int rc = statvfs(Path(a.arg(1)).c_str(), &sv);
       Report(a.line, rc, errno, rc == 0 ? "rdonly=" + std::to_string((sv.f_flag & ST_RDONLY) != 0) : "");
     }},
    {"stat_t", StatType},     // stat_t PATH
    {"fstatat_t", StatType},  // fstatat_t DIRH PATH FLAGS
    // --- /proc/self/fd links
    {"reopen",
     [](const Args& a) {  // reopen NEWH H FLAGS: open("/proc/self/fd/<H>", FLAGS)
       std::string p = "/proc/self/fd/" + std::to_string(Fd(a.arg(2)));
       int fd = open(p.c_str(), Flags(a.arg(3)), 0644);
       int e = errno;
       if (fd >= 0) g_fds[a.arg(1)] = fd;
       Report(a.line, fd < 0 ? -1 : 0, e);
     }},
    {"readlink_fd",
     [](const Args& a) {  // readlink_fd H: where /proc/self/fd/<H> leads
       char buf[PATH_MAX];
       std::string p = "/proc/self/fd/" + std::to_string(Fd(a.arg(1)));
       ssize_t n = readlink(p.c_str(), buf, sizeof buf - 1);
       int e = errno;
       Report(a.line, n < 0 ? -1 : 0, e, n > 0 ? Unroot(std::string(buf, static_cast<size_t>(n))) : "");
     }},
    {"lstat_fd",
     [](const Args& a) {  // lstat_fd H: /proc/self/fd/<H> is a link (lstat, fstatat and statx
       // without following) to the file (stat): what realpath implementations walking with lstat rely on
       std::string p = "/proc/self/fd/" + std::to_string(Fd(a.arg(1)));
       struct stat l, f;
       struct statx x;
       int rl = lstat(p.c_str(), &l), ra = fstatat(AT_FDCWD, p.c_str(), &f, AT_SYMLINK_NOFOLLOW);
       int rx = statx(AT_FDCWD, p.c_str(), AT_SYMLINK_NOFOLLOW, STATX_TYPE, &x);
       bool links = rl == 0 && S_ISLNK(l.st_mode) && ra == 0 && S_ISLNK(f.st_mode) && rx == 0 && S_ISLNK(x.stx_mode);
       int rs = stat(p.c_str(), &f);
       char b[96];
       snprintf(b, sizeof b, "nofollow_is_link=%d follow_mode=%o size=%lld", links, rs == 0 ? f.st_mode : 0u,
                rs == 0 ? static_cast<long long>(f.st_size) : -1LL);
       Report(a.line, rl, errno, b);
     }},
    // --- temporary names
    {"mkstemp", MakeTemp},   // mkstemp TEMPLATE [SUFFIXLEN]
    {"mkostemp", MakeTemp},  // mkostemp TEMPLATE [SUFFIXLEN]
    {"mkdtemp", MakeTemp},   // mkdtemp TEMPLATE
    // --- a name among a directory's entries, by each way of listing one
    {"readdir_has",
     [](const Args& a) {  // readdir_has D NAME: whether the stream lists NAME, and its d_type
       DIR* d = g_dirs.at(a.arg(1));
       rewinddir(d);
       std::string name = Path(a.arg(2)), found = "missing";
       errno = 0;
       while (struct dirent* e = readdir(d))
         if (name == e->d_name)
           found = "found type=" + std::to_string(e->d_type) + " ino_set=" + std::to_string(e->d_ino != 0);
       Report(a.line, errno ? -1 : 0, errno, found);
     }},
    {"scandir_has",
     [](const Args& a) {  // scandir_has PATH NAME
       struct dirent** list = nullptr;
       int n = scandir(Path(a.arg(1)).c_str(), &list, nullptr, alphasort);
       int e = errno;
       std::string name = Path(a.arg(2)), found = "missing";
       for (int i = 0; i < n; ++i) {
         if (name == list[i]->d_name) found = "found type=" + std::to_string(list[i]->d_type);
         free(list[i]);
       }
       free(list);
       Report(a.line, n < 0 ? -1 : 0, e, found);
     }},
    {"glob_under",
     [](const Args& a) {  // glob_under PATTERN: the matches under ROOT only (the parent holds more)
       glob_t g;
       int rc = glob(Path(a.arg(1)).c_str(), 0, nullptr, &g);
       std::vector<std::string> m;
       if (rc == 0) {
         for (size_t i = 0; i < g.gl_pathc; ++i)
           if (Unroot(g.gl_pathv[i]) != g.gl_pathv[i]) m.push_back(Unroot(g.gl_pathv[i]));
         globfree(&g);
       }
       Report(a.line, rc == GLOB_NOMATCH ? 0 : rc, 0, Joined(m, true));
     }},
    {"fts",
     [](const Args& a) {  // fts PATH FLAGS: every visit as "path:info:level" (sorted), and the end errno
       std::string root = Path(a.arg(1));
       char* roots[] = {root.data(), nullptr};
       FTS* f = fts_open(roots, Flags(a.arg(2)), nullptr);
       if (f == nullptr) {
         Report(a.line, -1, errno);
         return;
       }
       std::vector<std::string> v;
       errno = 0;
       const bool nostat = (Flags(a.arg(2)) & FTS_NOSTAT) != 0;
       while (FTSENT* e = fts_read(f)) {
         // With FTS_NOSTAT glibc leaves fts_statp undefined: only the type is reported.
         std::string size = (e->fts_info == FTS_F && !nostat) ? ":size=" + std::to_string(e->fts_statp->st_size) : "";
         v.push_back(Unroot(e->fts_path) + ":" + std::to_string(e->fts_info) + ":" + std::to_string(e->fts_level) +
                     size);
       }
       int e = errno;
       fts_close(f);
       Report(a.line, e ? -1 : 0, e, Joined(v, true));
     }},
    {"fts_children_has",
     [](const Args& a) {  // fts_children_has PATH NAME: NAME among the root's children
       std::string root = Path(a.arg(1));
       char* roots[] = {root.data(), nullptr};
       FTS* f = fts_open(roots, FTS_PHYSICAL, nullptr);
       if (f == nullptr) {
         Report(a.line, -1, errno);
         return;
       }
       FTSENT* r = fts_read(f);
       std::string name = Path(a.arg(2)), found = "missing";
       for (FTSENT* c = r ? fts_children(f, 0) : nullptr; c != nullptr; c = c->fts_link)
         if (name == c->fts_name) found = "found info=" + std::to_string(c->fts_info);
       fts_close(f);
       Report(a.line, r ? 0 : -1, r ? 0 : errno, found);
     }},
    {"errno_kept",
     [](const Args& a) {  // errno_kept PATH: a successful stat must leave errno alone
       struct stat st;
       errno = EXDEV;
       int rc = stat(Path(a.arg(1)).c_str(), &st);
       Report(a.line, rc, 0, std::string("errno_after=") + (strerrorname_np(errno) ? strerrorname_np(errno) : "0"));
     }},
};

void Run(const std::string& line) {
  std::stringstream ss(line);
  std::vector<std::string> words;
  std::string w;
  while (ss >> w) words.push_back(w);
  if (words.empty()) return;
  auto it = kOps.find(words[0]);
  if (it == kOps.end()) {
    std::cerr << "fsio: unknown op " << words[0] << "\n";
    exit(2);
  }
  errno = 0;
  it->second(Args{words, line});
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
