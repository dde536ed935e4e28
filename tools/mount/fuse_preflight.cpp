// Pre-mount checks (see fuse_preflight.hpp): the FUSE device, and a mount point that exists, is a
// directory, is not already mounted and is empty.
#include "fuse_preflight.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
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

// `given` as one word a shell takes back as it is, for a command a message suggests: bare when nothing in it is
// special, else quoted ('...', or $'...' with escapes when it holds a control character, so the message stays one
// line).
std::string ShellWord(const std::string& given) {
  // A relative name that starts with '-' would be taken for an option.
  const std::string path = !given.empty() && given[0] == '-' ? "./" + given : given;
  const bool plain = !path.empty() && path[0] != '=' &&  // zsh expands a leading '='
                     path.find_first_not_of(
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                         "0123456789_/.,:+=@%-") == std::string::npos;
  if (plain) return path;
  const bool control = std::any_of(path.begin(), path.end(), [](char c) { return c >= 0 && (c < 0x20 || c == 0x7f); });
  std::string out = control ? "$'" : "'";
  for (char c : control ? Printable(path) : path) {
    if (c != '\'') out += c;
    else out += control ? "\\'" : "'\\''";
  }
  return out + "'";
}

Status StaleMount(const std::string& mountpoint) {
  return Status(Code::kIoError, "mount point " + Printable(mountpoint) +
                                    " is a stale FUSE mount (its server is gone); run `fusermount3 -u " +
                                    ShellWord(mountpoint) + "` first");
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
      return Status(Code::kNotFound, "mount point " + Printable(mountpoint) + " does not exist (create it with mkdir)");
    if (err == ENOTDIR)
      return Status(Code::kNotDirectory, "mount point " + Printable(mountpoint) + " is not a directory");
    // A FUSE mount whose server died answers ENOTCONN to what the kernel has not cached until it is unmounted.
    if (err == ENOTCONN) return StaleMount(mountpoint);
    return Status::FromErrno(err, "stat " + Printable(mountpoint));
  }
  if (!S_ISDIR(st.st_mode))
    return Status(Code::kNotDirectory, "mount point " + Printable(mountpoint) + " is not a directory");

  char real[PATH_MAX];
  if (::realpath(mountpoint.c_str(), real) == nullptr)
    return Status::FromErrno(errno, "realpath " + Printable(mountpoint));
  // Stacking a second mount would hide the first one and confuse whoever unmounts later.
  if (IsMountPoint(real)) {
    // The stat above may have come from the kernel's attribute cache of a dead server's mount; statfs always
    // asks the server.
    struct statfs sf;
    if (::statfs(real, &sf) != 0 && errno == ENOTCONN) return StaleMount(mountpoint);
    return Status(Code::kExists, "mount point " + Printable(mountpoint) +
                                     " is busy: something is already mounted there "
                                     "(unmount it with `fusermount3 -u " +
                                     ShellWord(mountpoint) + "`)");
  }
  if (allow_nonempty) return Status::Ok();
  DIR* d = ::opendir(real);
  if (d == nullptr) return Status::FromErrno(errno, "opendir " + Printable(mountpoint));
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
    return Status(Code::kExists, "mount point " + Printable(mountpoint) +
                                     " is not empty (its files would be hidden; "
                                     "use -o nonempty to mount over it anyway)");
  return Status::Ok();
}

}  // namespace fanstore::mount
