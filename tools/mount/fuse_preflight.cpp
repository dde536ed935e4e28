// Pre-mount checks (see fuse_preflight.hpp): the FUSE device, and a mount point that exists, is a
// directory, is not already mounted and is empty.
#include "fuse_preflight.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fanstore::mount {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string UnescapeMountinfo(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7') {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

Status CheckFuseDevice(const std::string& device) {
  const int fd = ::open(device.c_str(), O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return Status::Ok();
  }
  const int err = errno;
  if (err == ENOENT || err == ENODEV || err == ENXIO)
    return Status(Code::kUnsupported,
                  "FUSE is not available: " + device + " " + (err == ENOENT ? "does not exist" : "has no driver") +
                      " (load the module with `modprobe fuse`; in a container pass --device /dev/fuse)"
                      ", or use `fanstore run` (LD_PRELOAD) instead");
  if (err == EACCES || err == EPERM)
    return Status(Code::kPermission, "cannot open " + device + ": " + std::strerror(err) +
                                         " (add yourself to the group owning it, or use `fanstore run` instead)");
  return Status::FromErrno(err, "open " + device);
}

bool IsMountPoint(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // Fields: id parent major:minor root mountpoint ...
    std::istringstream fields(line);
    std::string id, parent, devno, root, mnt;
    if (!(fields >> id >> parent >> devno >> root >> mnt)) continue;
    if (UnescapeMountinfo(mnt) == path) return true;
  }
  return false;
}

Status CheckMountPoint(const std::string& mountpoint, bool allow_nonempty) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT)
      return Status(Code::kNotFound, "mount point " + mountpoint + " does not exist (create it with mkdir)");
    if (err == ENOTDIR) return Status(Code::kNotDirectory, "mount point " + mountpoint + " is not a directory");
    // A FUSE mount whose server died answers ENOTCONN to everything until it is unmounted.
    if (err == ENOTCONN)
      return Status(Code::kIoError, "mount point " + mountpoint +
                                        " is a stale FUSE mount (its server is gone); run `fusermount3 -u " +
                                        mountpoint + "` first");
    return Status::FromErrno(err, "stat " + mountpoint);
  }
  if (!S_ISDIR(st.st_mode)) return Status(Code::kNotDirectory, "mount point " + mountpoint + " is not a directory");

  char real[PATH_MAX];
  if (::realpath(mountpoint.c_str(), real) == nullptr) return Status::FromErrno(errno, "realpath " + mountpoint);
  // Stacking a second mount would hide the first one and confuse whoever unmounts later.
  if (IsMountPoint(real))
    return Status(Code::kExists, "mount point " + mountpoint +
                                     " is busy: something is already mounted there "
                                     "(unmount it with `fusermount3 -u " +
                                     mountpoint + "`)");
  if (allow_nonempty) return Status::Ok();
  DIR* d = ::opendir(real);
  if (d == nullptr) return Status::FromErrno(errno, "opendir " + mountpoint);
  bool empty = true;
  while (const dirent* de = ::readdir(d)) {
    if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  // libfuse 3 dropped this check; we keep it because mounting over files silently hides them.
  if (!empty)
    return Status(Code::kExists, "mount point " + mountpoint +
                                     " is not empty (its files would be hidden; "
                                     "use -o nonempty to mount over it anyway)");
  return Status::Ok();
}

}  // namespace fanstore::mount
