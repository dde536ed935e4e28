// Tells the node's FanStore daemon this rank's reading order for the epoch (its prefetch hint), when the trainer
// runs under `fanstore run --daemon` or with FANSTORE_DAEMON set by hand: the daemon fetches the remote samples
// ahead into its cache. Plain POSIX sockets (the data library links no fanstore code) speaking the header-only
// wire protocol (fanstore/protocol/include/fanstore/protocol/daemon_wire.hpp), with "{node}" in the socket path
// expanded as every client does. A hint is an optimisation: any failure is silently a no-op.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fanstore/env.hpp"
#include "fanstore/protocol/daemon_wire.hpp"
#include "fanstore/protocol/node_name.hpp"
#include "trainer/data/sample_dataset.hpp"

namespace fanstore::trainer::data {

namespace daemon_hint_detail {

inline bool send_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// FANSTORE_DAEMON with "{node}" replaced by this node's name; empty when unset or unusable.
inline std::string socket_path() {
  const char* sock = std::getenv(env::kDaemon);
  if (!sock || !*sock) return "";
  std::string path = sock;
  if (path.find(node_name::kKey) != std::string::npos) {
    const auto node = node_name::LookUp();
    if (!node.error.empty()) return "";
    path = node_name::Substitute(path, node.name);
  }
  return path.size() < sizeof(sockaddr_un{}.sun_path) ? path : "";
}

}  // namespace daemon_hint_detail

// Sends the paths of `batches` (this rank's remaining batches, in order) as stream `rank`; true when the daemon
// took the hint. Paths outside FANSTORE_MOUNT (default /fanstore) are left out.
inline bool hint_epoch_order(const SampleDataset& dataset, const std::vector<std::vector<std::size_t>>& batches,
                             int rank) {
  namespace wire = fanstore::daemon_proto;
  const std::string sock = daemon_hint_detail::socket_path();
  if (sock.empty()) return false;
  const char* m = std::getenv(env::kMount);
  std::string mount = m && *m ? m : env::kDefaultMount;
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
  if (body.empty() || body.size() > wire::kMaxPrefetchBody) return false;
  wire::Request request;
  request.type = wire::MsgType::kPrefetch;
  request.req_id = 2;
  request.stream = 0x7472000000000000ull | static_cast<std::uint32_t>(rank);  // "tr" + rank: one stream per rank
  request.body_len = body.size();
  unsigned char head[wire::kRequestSize];
  wire::EncodeRequest(request, head);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            daemon_hint_detail::send_all(fd, head, sizeof head) &&
            daemon_hint_detail::send_all(fd, body.data(), body.size());
  unsigned char reply[wire::kReplyHeaderSize];
  std::size_t got = 0;
  while (ok && got < sizeof reply) {
    ssize_t r = ::recv(fd, reply + got, sizeof reply - got, 0);
    if (r <= 0) ok = false;
    else got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  wire::ReplyHeader h;
  return ok && wire::DecodeReplyHeader(reply, &h) && h.code == Code::kOk;
}

}  // namespace fanstore::trainer::data
