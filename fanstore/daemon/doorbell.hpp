// A wake-up channel next to MPI, which gives the progress thread no fd to sleep on: whoever sends a peer a request
// or a reply also sends it a 1-byte UDP datagram, and the peer's epoll wakes at once and looks at MPI. The datagram
// carries nothing: a lost one costs only the old latency, a stranger's only a look at MPI (docs/daemon.md,
// "Progress"). Each rank advertises its first IPv4 address that is up and not loopback, so peers on other hosts and
// in other network namespaces reach it; serve.cpp exchanges the addresses at start-up.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore::daemon {

class Doorbell {
 public:
  // 8 bytes on the wire: IPv4 address and port, network order. All zero: that rank has no doorbell.
  struct Address {
    uint32_t ip = 0;
    uint16_t port = 0;
    uint16_t unused = 0;
    bool valid() const { return port != 0; }
  };

  // A bound, nonblocking socket, or null with *why set (the daemon then runs without one).
  static std::unique_ptr<Doorbell> Open(Status* why);
  ~Doorbell();

  Address address() const { return self_; }
  int fd() const { return fd_; }
  // Every rank's address (index = rank); ranks without a valid one are never rung.
  void SetPeers(std::vector<Address> peers);

  // Marks `rank` to be rung at the next Flush: several messages to one peer in one step cost one datagram.
  void Ring(int rank);
  // Sends the marked datagrams. Never blocks (a full socket buffer drops one: the peer is awake anyway).
  void Flush();
  // Reads every datagram waiting; the number read.
  int Drain();

  uint64_t rung() const { return rung_; }

 private:
  Doorbell(int fd, Address self) : fd_(fd), self_(self) {}
  int fd_;
  Address self_;
  std::vector<sockaddr_in> peers_;
  std::vector<char> marked_;
  std::vector<int> to_ring_;
  uint64_t rung_ = 0;
};

}  // namespace fanstore::daemon
