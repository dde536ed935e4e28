// VerifyImage: decode every file in constant memory on `threads` threads and report each bad one.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "fanstore/image.hpp"

namespace fanstore {

uint64_t VerifyImage(const Image& img, int threads, const std::function<void(const Entry&, const Status&)>& bad) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<uint64_t> next{0}, nbad{0};
  std::mutex report_mu;  // `bad` is called from one thread at a time
  auto work = [&] {
    for (uint64_t id; (id = next.fetch_add(1)) < img.size();) {
      Entry e = img.Get(static_cast<uint32_t>(id));
      if (e.is_dir()) continue;
      Status s = e.is_link() ? img.LinkTarget(e).status() : img.CheckFile(static_cast<uint32_t>(id));
      if (s.ok()) continue;
      nbad.fetch_add(1);
      if (bad) {
        std::lock_guard<std::mutex> lk(report_mu);
        bad(e, s);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return nbad.load();
}

}  // namespace fanstore
