// JoinNodeCache: make or join a node's cache directory and start the reaper that removes it after the last run.
//
// Who uses the directory is counted with flock(2) on its `lock` file: each run's reaper holds a shared lock
// for as long as its run's process lives; the reaper that can turn its lock exclusive is the last user and
// removes everything. A joiner that got its shared lock on a lock file unlinked meanwhile starts over.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "fanstore/node_cache.hpp"
#include "fanstore/protocol/image_format.hpp"
#include "node_cache.hpp"

namespace fanstore {

using namespace node_cache_format;

namespace {

std::string DirName(const std::string& root, uint64_t content_key) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/fanstore-%u-%016" PRIx64, static_cast<unsigned>(::getuid()), content_key);
  return root + buf;
}

// Removes the files of a cache directory and the directory, with the copies the loader's audit module keeps in
// its libs/ tree (interpose/mirror.hpp). The lock file goes last but one, so a joiner that still finds the
// directory recreates what it needs.
void RemoveCacheDir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == ".." || n == "lock") continue;
      if (::unlinkat(dirfd(d), e->d_name, 0) != 0 && errno == EISDIR)
        ::nftw((dir + "/" + n).c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); }, 16,
               FTW_DEPTH | FTW_PHYS);
    }
    ::closedir(d);
  }
  ::unlink((dir + "/lock").c_str());
  ::rmdir(dir.c_str());
}

// Directories of this user left by runs whose reaper died with them (e.g. a job's cgroup was killed):
// nobody holds their lock, so an exclusive try-lock succeeds.
void RemoveStale(const std::string& root, const std::string& mine) {
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "fanstore-%u-", static_cast<unsigned>(::getuid()));
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix, std::strlen(prefix)) != 0) continue;
    const std::string dir = root + "/" + e->d_name;
    if (dir == mine) continue;
    int fd = ::open((dir + "/lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) RemoveCacheDir(dir);
    ::close(fd);
  }
  ::closedir(d);
}

// Makes `dir`/state for `img` unless a valid one exists (temp file + link: never seen half-written).
Status EnsureState(const std::string& dir, const Image& img, uint64_t budget) {
  const std::string path = dir + "/state";
  char s[kStateSize] = {};
  std::memcpy(s + kStMagic, kStateMagic, sizeof kStateMagic);
  format::Store32(s + kStVersion, kVersion);
  format::Store32(s + kStChunkShift, static_cast<uint32_t>(__builtin_ctz(img.ChunkSize())));
  format::Store64(s + kStImageId, img.ContentKey());
  format::Store64(s + kStEntries, img.size());
  format::Store64(s + kStBudget, budget);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "node chunk cache: create " + tmp);
  bool ok = ::write(fd, s, sizeof s) == static_cast<ssize_t>(sizeof s);
  ::close(fd);
  if (ok && ::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) ok = false;
  ::unlink(tmp.c_str());
  if (!ok) return Status::FromErrno(errno, "node chunk cache: publish " + path);
  return Status::Ok();
}

// The reaper: its own session (a Ctrl-C or the job's process-group signal is not for it), no fds but the
// two it needs, waits for `owner` to exit, then removes the directory if it was the last user.
[[noreturn]] void Reap(const std::string& dir, int lock_fd, int pidfd, pid_t owner) {
  ::setsid();
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  // Keep exactly: 0-2 on /dev/null, 3 the lock, 4 the pidfd.
  int devnull = ::open("/dev/null", O_RDWR);
  int keep_lock = ::fcntl(lock_fd, F_DUPFD, 100), keep_pid = pidfd >= 0 ? ::fcntl(pidfd, F_DUPFD, 100) : -1;
  for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
  lock_fd = ::dup2(keep_lock, 3);
  pidfd = keep_pid >= 0 ? ::dup2(keep_pid, 4) : -1;
  if (::syscall(SYS_close_range, 5u, ~0u, 0u) != 0)
    for (int fd = 5; fd < 4096; ++fd) ::close(fd);
  if (::chdir("/") != 0) {
  }
  if (pidfd >= 0) {
    struct pollfd p {
      pidfd, POLLIN, 0
    };
    while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
  } else {
    while (::kill(owner, 0) == 0 || errno == EPERM) ::usleep(500 * 1000);
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) == 0) RemoveCacheDir(dir);
  ::_exit(0);
}

}  // namespace

uint64_t DefaultNodeCacheBudget(const std::string& root) {
  const uint64_t ram =
      static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t budget = ram / 4;
  struct statvfs sv;
  if (::statvfs(root.c_str(), &sv) == 0) budget = std::min<uint64_t>(budget, uint64_t{sv.f_bavail} * sv.f_frsize / 2);
  return budget;
}

Result<std::string> JoinNodeCache(const Image& img, const NodeCacheOptions& opts, pid_t owner) {
  const std::string dir = DirName(opts.root, img.ContentKey());
  const uint64_t budget = opts.budget ? opts.budget : DefaultNodeCacheBudget(opts.root);
  RemoveStale(opts.root, dir);
  int lock_fd = -1;
  for (int attempt = 0;; ++attempt) {
    if (attempt == 5) return Status(Code::kIoError, "node chunk cache " + dir + " keeps disappearing under us");
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return Status::FromErrno(errno, "node chunk cache: mkdir " + dir);
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0) continue;
    // Only a private directory of ours: never follow a link or share one another user could plant.
    if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0)
      return Status(Code::kPermission,
                    "node chunk cache " + dir + " exists but is not a private directory of this user: remove it");
    lock_fd = ::open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock_fd < 0) continue;
    while (::flock(lock_fd, LOCK_SH) != 0 && errno == EINTR) {
    }
    struct stat lst;
    if (::fstat(lock_fd, &lst) == 0 && lst.st_nlink > 0) break;
    ::close(lock_fd);  // removed by the last user while we waited: start over
    lock_fd = -1;
  }
  Status s = EnsureState(dir, img, budget);
  if (s.ok()) {
    auto probe = NodeCache::Attach(dir, img);  // the state must fit this image and the files must open
    if (!probe.ok()) s = probe.status();
  }
  if (!s.ok()) {
    ::close(lock_fd);
    return s;
  }
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, owner, 0));
  // Double fork: the reaper must not be a child of the user's program (which may wait for all its children).
  pid_t a = ::fork();
  if (a < 0) {
    int err = errno;
    ::close(lock_fd);
    if (pidfd >= 0) ::close(pidfd);
    return Status::FromErrno(err, "node chunk cache: fork");
  }
  if (a == 0) {
    if (::fork() == 0) Reap(dir, lock_fd, pidfd, owner);
    ::_exit(0);
  }
  while (::waitpid(a, nullptr, 0) < 0 && errno == EINTR) {
  }
  // The owner keeps no lock of its own: the reaper's shared lock (the same open file description,
  // inherited) stands for this run until the owner exits.
  ::close(lock_fd);
  if (pidfd >= 0) ::close(pidfd);
  return dir;
}

Result<std::string> KeepIndexCopy(const Image& img, const std::string& dir) {
  const std::string copy = dir + "/" + kIndexCopyName;
  struct stat st;
  if (::lstat(copy.c_str(), &st) != 0) {
    // Written under a temporary name and renamed into place whole: a reader never sees a partial copy.
    const std::string tmp = copy + ".tmp." + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400);
    if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
    Status s = CopyIndexFile(img.IndexFile(), fd);
    if (::close(fd) != 0 && s.ok()) s = Status::FromErrno(errno, "write " + tmp);
    // One step, never over another run's copy (whose inode, and so trust token, its children use).
    if (s.ok() && ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, copy.c_str(), RENAME_NOREPLACE) != 0 && errno != EEXIST)
      s = Status::FromErrno(errno, "rename to " + copy);
    ::unlink(tmp.c_str());  // (gone after a rename; left when another run's copy came first)
    if (!s.ok()) return s;
  }
  ImageOpenOptions io;
  io.index_file = copy;
  auto c = Image::Open(img.dir(), io);
  if (!c.ok()) return c.status();
  if ((*c)->ContentKey() == img.ContentKey()) return (*c)->TrustToken();
  ::unlink(copy.c_str());  // not this index (it changed while copied): no reader may take it for this one
  return Status(Code::kCorrupt, img.IndexFile() + " changed while it was copied");
}

namespace {
// The first `n` bytes of `path` (a regular file), or "" (a FIFO is not waited on).
std::string Head(const std::string& path, size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  std::string out(n, '\0');
  struct stat st;
  const bool ok =
      ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, out.data(), n, 0) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok ? out : "";
}
}  // namespace

std::string IndexCopyIn(const std::string& dir, const std::string& image_dir) {
  if (dir.empty()) return "";
  const std::string copy = dir + "/" + kIndexCopyName;
  struct stat st;
  if (::lstat(copy.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) return "";
  // The copy of this image's index as it stands: the same header (image id, sizes, body checksum). Another image
  // (a nested program given another FANSTORE_IMAGE) or an index replaced since maps its own.
  const std::string mine = Head(copy, format::kHeaderSize);
  if (mine.empty() || mine != Head(image_dir + "/" + format::kIndexName, format::kHeaderSize)) return "";
  return copy;
}

}  // namespace fanstore
