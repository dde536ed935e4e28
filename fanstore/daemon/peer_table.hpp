// Liveness of the other daemons as this rank sees them (pure logic, no MPI): a peer that lets a request time out
// without a word since it was asked is down -- its reads fail over or fail at once instead of each waiting the
// full timeout -- until any message from it arrives; one probe is sent to each peer that went down.
#pragma once

#include <cstdint>
#include <vector>

namespace fanstore::daemon {

class PeerTable {
 public:
  explicit PeerTable(int nranks) : peers_(static_cast<size_t>(nranks > 0 ? nranks : 0)) {}

  bool up(int r) const { return !peers_[static_cast<size_t>(r)].down; }
  int64_t down_since_us(int r) const { return peers_[static_cast<size_t>(r)].down_since; }
  // When the last message from `r` arrived (-1: never).
  int64_t last_heard_us(int r) const { return peers_[static_cast<size_t>(r)].last_heard; }

  // Any message from `r` (a reply, a request, a probe answer): it is alive. True when it was down until now.
  bool Heard(int r, int64_t now_us) {
    Peer& p = peers_[static_cast<size_t>(r)];
    p.last_heard = now_us;
    bool was_down = p.down;
    p.down = false;
    p.probe_due = false;
    return was_down;
  }

  // A request sent to `r` at `asked_us` had no answer by `now_us`. A peer that said anything since it was
  // asked is alive but busy (the request alone fails); one that said nothing is declared down. True when `r`
  // went down with this call (the caller then fails over every other request waiting on it).
  bool TimedOut(int r, int64_t asked_us, int64_t now_us) {
    Peer& p = peers_[static_cast<size_t>(r)];
    if (p.down || p.last_heard >= asked_us) return false;
    p.down = true;
    p.down_since = now_us;
    p.probe_due = true;
    return true;
  }

  // True once per down event: time to send the peer a probe (its answer, or any other message, brings it back).
  bool TakeProbe(int r) {
    Peer& p = peers_[static_cast<size_t>(r)];
    bool due = p.down && p.probe_due;
    p.probe_due = false;
    return due;
  }

 private:
  struct Peer {
    bool down = false;
    bool probe_due = false;
    int64_t last_heard = -1;
    int64_t down_since = 0;
  };
  std::vector<Peer> peers_;
};

}  // namespace fanstore::daemon
