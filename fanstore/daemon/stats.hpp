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
  std::atomic<uint64_t> bytes_sent{0};       // stored bytes sent to other ranks
  std::atomic<uint64_t> bytes_received{0};   // stored bytes received from other ranks
  std::atomic<uint64_t> failovers{0};        // attempts moved to the next replica
  // Latency of one client fetch, from request read to reply queued, in microseconds.
  void AddLatency(uint64_t us);
  // "served 120 client requests (0 errors), 40 for peers, sent 1.2 MiB, received 3.4 MiB, p50 210 us, p99 900 us"
  std::string Line() const;

 private:
  mutable std::mutex mu_;
  std::vector<uint32_t> lat_us_;  // capped sample (first N), enough for percentiles at exit
};

}  // namespace fanstore::daemon
