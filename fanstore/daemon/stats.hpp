// Per-daemon counters and request latencies, printed as one line at exit.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace fanstore::daemon {

class DaemonStats {
 public:
  std::atomic<uint64_t> client_requests{0};  // fetches answered to local clients
  std::atomic<uint64_t> client_errors{0};    // ... of which failed (timeout, unreadable)
  std::atomic<uint64_t> peer_requests{0};    // fetches served to other ranks
  std::atomic<uint64_t> mapped_sends{0};     // ... of which sent straight from a partition's mapping
  std::atomic<uint64_t> peer_fetches{0};     // fetches this rank sent to other ranks (for clients or prefetch)
  std::atomic<uint64_t> bytes_sent{0};       // stored bytes sent to other ranks
  std::atomic<uint64_t> bytes_received{0};   // stored bytes received from other ranks
  std::atomic<uint64_t> failovers{0};        // attempts moved to the next replica
  std::atomic<uint64_t> timeouts{0};         // attempts that waited their whole deadline
  std::atomic<uint64_t> fast_fails{0};       // attempts skipped or cut short because the peer was known down
  std::atomic<uint64_t> peers_down{0};       // times a peer was declared down
  std::atomic<uint64_t> cache_hits{0};       // client fetches answered from the fetch cache
  std::atomic<uint64_t> shared_hits{0};      // reads clients made straight from the shared fetch cache
  std::atomic<uint64_t> coalesced{0};        // client fetches that joined one already in flight
  std::atomic<uint64_t> prefetched{0};       // ranges fetched ahead because of a hint
  std::atomic<uint64_t> prefetch_hits{0};    // client fetches answered by a prefetched range
  std::atomic<uint64_t> refused{0};          // connections refused (SO_PEERCRED)
  std::atomic<uint64_t> doorbells_rung{0};   // wake-up datagrams sent to peers
  std::atomic<uint64_t> doorbells_heard{0};  // ... received (from peers or anyone else)
  std::atomic<uint64_t> memfd_replies{0};    // replies over --conn-memory, each in a memfd of its own
  // Latency of one client fetch, from request read to reply queued, in microseconds.
  void AddLatency(uint64_t us);
  // "served 120 client requests (0 errors, 0 failovers), 40 peer requests; ..."
  std::string Line() const;

 private:
  mutable std::mutex mu_;
  std::vector<uint32_t> lat_us_;  // capped sample (first N), enough for percentiles at exit
};

}  // namespace fanstore::daemon
