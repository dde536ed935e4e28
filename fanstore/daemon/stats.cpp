#include "stats.hpp"

#include <algorithm>
#include <cstdio>

namespace fanstore::daemon {

void DaemonStats::AddLatency(uint64_t us) {
  std::lock_guard<std::mutex> g(mu_);
  // Bounded memory for a daemon that runs for days: percentiles of the first 4M requests are plenty.
  if (lat_us_.size() < (4u << 20)) lat_us_.push_back(static_cast<uint32_t>(std::min<uint64_t>(us, UINT32_MAX)));
}

std::string DaemonStats::Line() const {
  std::vector<uint32_t> v;
  {
    std::lock_guard<std::mutex> g(mu_);
    v = lat_us_;
  }
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) -> unsigned long long {
    if (v.empty()) return 0;
    size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
    return v[i];
  };
  auto u = [](const std::atomic<uint64_t>& a) { return static_cast<unsigned long long>(a.load()); };
  char buf[1200];
  std::snprintf(
      buf, sizeof buf,
      "served %llu client requests (%llu errors, %llu failovers), %llu peer requests (%llu sent from mappings); "
      "bytes sent %llu, received %llu; client latency p50 %llu us, p99 %llu us; %llu peer fetches, %llu cache hits, "
      "%llu coalesced, %llu prefetched, %llu prefetch hits; %llu timeouts, %llu fast fails, %llu peers down; "
      "%llu connections refused; %llu shared cache hits; %llu doorbells rung, %llu doorbells heard; "
      "%llu replies in memfds of their own",
      u(client_requests), u(client_errors), u(failovers), u(peer_requests), u(mapped_sends), u(bytes_sent),
      u(bytes_received), pct(0.50), pct(0.99), u(peer_fetches), u(cache_hits), u(coalesced), u(prefetched),
      u(prefetch_hits), u(timeouts), u(fast_fails), u(peers_down), u(refused), u(shared_hits), u(doorbells_rung),
      u(doorbells_heard), u(memfd_replies));
  return buf;
}

}  // namespace fanstore::daemon
