// mirror::Root and mirror::Install (mirror.hpp).
#include "mirror.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "fanstore/env.hpp"
#include "fanstore/path.hpp"

namespace fanstore::interpose::mirror {

Status MakeDirs(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return Status::Ok();
  if (errno != ENOENT) return Status::FromErrno(errno, "cannot create " + dir);
  size_t slash = dir.rfind('/');
  if (slash == 0 || slash == std::string::npos) return Status::FromErrno(ENOENT, "cannot create " + dir);
  Status s = MakeDirs(dir.substr(0, slash));
  if (!s.ok()) return s;
  if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return Status::Ok();
  return Status::FromErrno(errno, "cannot create " + dir);
}

namespace {

// The node chunk cache's libs/ tree when this process may use it: the cache is the directory of the user who
// started `fanstore run` (mode 0700). A process of the job that runs as another user (a root entrypoint that
// switched users with setpriv, runuser or gosu) can neither write there nor should share copies with that user.
std::string NodeLibs() {
  const char* node = std::getenv(env::kNodeCacheDir);
  if (node == nullptr || *node == '\0') return {};
  struct stat st;
  if (::lstat(node, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) return {};
  return std::string(node) + "/libs";
}

}  // namespace

std::string Base() {
  if (std::string node = NodeLibs(); !node.empty()) return node;
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/fanstore-libs-" + std::to_string(::geteuid());
}

// The directory of `img`'s copies under `base` (Base's; the node chunk cache's is per image already).
std::string UnderBase(const std::string& base, const Image& img) {
  char key[32];
  std::snprintf(key, sizeof key, "/%016" PRIx64, img.ContentKey());
  return base + key;
}

std::string Where(const Image& img) {
  if (std::string node = NodeLibs(); !node.empty()) return node;
  return UnderBase(Base(), img);
}

std::string Root(const Image& img, std::string* error) {
  if (std::string node = NodeLibs(); !node.empty()) return node;
  const std::string base = Base();
  if (::mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = Status::FromErrno(errno, "cannot create " + base).message() + " (set TMPDIR to a writable directory)";
    return {};
  }
  struct stat st;
  // Files are created with the effective uid: the directory must be that user's alone, or another user could plant
  // a library in it.
  if (::lstat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    *error = base + " is not a private directory of this user (remove it, or set TMPDIR)";
    return {};
  }
  return UnderBase(base, img);
}

bool ToMount(std::string_view path, std::string_view mirror, std::string_view mount, std::string* out) {
  const size_t r = mirror.size();
  if (r == 0 || path.compare(0, r, mirror) != 0 || (path.size() > r && path[r] != '/')) return false;
  const std::string n = NormalizeAbsolute(path);  // "MIRROR/../x" is not under the mirror
  if (n.compare(0, r, mirror) != 0 || (n.size() > r && n[r] != '/')) return false;
  out->assign(mount).append(n, r, std::string::npos);
  return true;
}

Status Install(const std::string& root, const Entry& e, const std::function<Status(int fd)>& write, std::string* path) {
  *path = root + "/" + std::string(e.path);
  struct stat st;
  if (::lstat(path->c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      static_cast<uint64_t>(st.st_size) == e.size)
    return Status::Ok();  // made by another process of the node (renamed only once complete)
  if (Status d = MakeDirs(path->substr(0, path->rfind('/'))); !d.ok()) return d;
  const std::string tmp = *path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, e.mode & 0755);
  if (fd < 0) return Status::FromErrno(errno, "cannot create " + tmp);
  Status s = write(fd);
  if (::close(fd) != 0 && s.ok()) s = Status::FromErrno(errno, "cannot write " + tmp);
  if (s.ok() && ::rename(tmp.c_str(), path->c_str()) != 0) s = Status::FromErrno(errno, "cannot rename " + tmp);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace fanstore::interpose::mirror
