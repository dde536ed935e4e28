// The address of a Unix socket at a path of any length, for the daemon's bind and the client's connect alike: a
// path too long for sun_path is reached through /proc/self/fd/N/NAME, N an O_PATH descriptor of its directory, which
// the kernel resolves to the same directory (the socket file gets, or is found under, the very name `path`).
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace fanstore {

class SocketAddress {
 public:
  explicit SocketAddress(const std::string& path) {
    std::string via = path;
    const size_t slash = path.rfind('/');
    if (path.size() >= sizeof addr_.sun_path && slash != std::string::npos) {
      const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
      dir_fd_ = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (dir_fd_ < 0) dir_errno_ = errno;
      else via = "/proc/self/fd/" + std::to_string(dir_fd_) + path.substr(slash);
    }
    fits_ = via.size() < sizeof addr_.sun_path;
    addr_.sun_family = AF_UNIX;
    if (fits_) std::memcpy(addr_.sun_path, via.c_str(), via.size() + 1);
  }
  ~SocketAddress() {
    if (dir_fd_ >= 0) ::close(dir_fd_);
  }
  SocketAddress(const SocketAddress&) = delete;
  SocketAddress& operator=(const SocketAddress&) = delete;

  // The address fits sun_path, directly or through the directory (else: kNameTooLong for the caller to say).
  bool fits() const { return fits_; }
  // errno of opening the directory of a path too long to use directly (0: not needed, or opened).
  int dir_errno() const { return dir_errno_; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&addr_); }
  socklen_t size() const { return sizeof addr_; }

 private:
  sockaddr_un addr_{};
  int dir_fd_ = -1, dir_errno_ = 0;
  bool fits_ = false;
};

}  // namespace fanstore
