// Tells the node's FanStore daemon this rank's reading order for the epoch (its prefetch hint), when the trainer
// runs under `fanstore run --daemon` (FANSTORE_DAEMON set): the daemon fetches the remote samples ahead into its
// node cache. Self-contained (plain POSIX sockets; the data library links no fanstore code): the request is the
// documented prefetch message of docs/daemon.md. A hint is an optimisation: any failure is silently a no-op.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "trainer/data/sample_dataset.hpp"

namespace fanstore::trainer::data {

namespace daemon_hint_detail {

inline void put(std::string& b, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline bool send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace daemon_hint_detail

// Sends the paths of `batches` (this rank's remaining batches, in order) as stream `rank`; true when the daemon
// took the hint. Paths outside FANSTORE_MOUNT (default /fanstore) are left out.
inline bool hint_epoch_order(const SampleDataset& dataset, const std::vector<std::vector<std::size_t>>& batches,
                             int rank) {
  const char* sock = std::getenv("FANSTORE_DAEMON");
  if (!sock || !*sock || std::strlen(sock) >= sizeof(sockaddr_un{}.sun_path)) return false;
  const char* m = std::getenv("FANSTORE_MOUNT");
  std::string mount = m && *m ? m : "/fanstore";
  while (mount.size() > 1 && mount.back() == '/') mount.pop_back();
  std::string body;
  for (const auto& batch : batches)
    for (std::size_t i : batch) {
      std::string p = dataset.sample_path(i);
      if (p.size() <= mount.size() + 1 || p.compare(0, mount.size(), mount) != 0 || p[mount.size()] != '/') continue;
      if (p.find('\n') != std::string::npos) continue;
      body.append(p, mount.size() + 1, std::string::npos);
      body.push_back('\n');
    }
  if (body.empty() || body.size() > (64u << 20)) return false;
  // Request: magic "FSDQ", version 2, type 3 (prefetch), req_id, stream, flags 0, 8 reserved bytes, body length.
  using daemon_hint_detail::put;
  std::string req;
  put(req, 0x51445346, 4);
  put(req, 2, 2);
  put(req, 3, 2);
  put(req, 2, 8);
  put(req, 0x7472000000000000ull | static_cast<std::uint32_t>(rank), 8);
  put(req, 0, 4);
  put(req, 0, 4);
  put(req, 0, 8);
  put(req, body.size(), 8);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, sock, std::strlen(sock) + 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            daemon_hint_detail::send_all(fd, req.data(), req.size()) &&
            daemon_hint_detail::send_all(fd, body.data(), body.size());
  // The reply's 48-byte header: code (offset 16) 0 means the daemon took it.
  unsigned char h[48];
  std::size_t got = 0;
  while (ok && got < sizeof h) {
    ssize_t r = ::recv(fd, h + got, sizeof h - got, 0);
    if (r <= 0) ok = false;
    else got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return ok && h[16] == 0 && h[17] == 0 && h[18] == 0 && h[19] == 0;
}

}  // namespace fanstore::trainer::data
