#include "doorbell.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fanstore::daemon {
namespace {

// The first IPv4 address that is up and not loopback, else 127.0.0.1 (network order).
uint32_t AdvertisedIp() {
  uint32_t found = htonl(INADDR_LOOPBACK);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    found = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    break;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

std::unique_ptr<Doorbell> Doorbell::Open(Status* why) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = Status::FromErrno(errno, "doorbell socket");
    return nullptr;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    *why = Status::FromErrno(errno, "doorbell bind");
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<Doorbell>(new Doorbell(fd, Address{.ip = AdvertisedIp(), .port = a.sin_port}));
}

Doorbell::~Doorbell() { close(fd_); }

void Doorbell::SetPeers(std::vector<Address> peers) {
  peers_.assign(peers.size(), sockaddr_in{});
  for (size_t r = 0; r < peers.size(); ++r) {
    peers_[r].sin_family = AF_INET;
    peers_[r].sin_addr.s_addr = peers[r].ip;
    peers_[r].sin_port = peers[r].port;  // 0: never rung
  }
  marked_.assign(peers.size(), 0);
}

void Doorbell::Ring(int rank) {
  auto r = static_cast<size_t>(rank);
  if (rank < 0 || r >= peers_.size() || marked_[r] || peers_[r].sin_port == 0) return;
  marked_[r] = 1;
  to_ring_.push_back(rank);
}

void Doorbell::Flush() {
  for (int r : to_ring_) {
    marked_[static_cast<size_t>(r)] = 0;
    const sockaddr_in& to = peers_[static_cast<size_t>(r)];
    char b = 1;
    if (sendto(fd_, &b, 1, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 1) ++rung_;
  }
  to_ring_.clear();
}

int Doorbell::Drain() {
  int n = 0;
  char buf[64];
  while (recv(fd_, buf, sizeof buf, MSG_DONTWAIT) >= 0) ++n;
  return n;
}

}  // namespace fanstore::daemon
