// Prefetcher: per-stream cursors over the hinted order, a look-ahead bound, and the list of ranges fetched
// ahead so that ranges the readers skipped can be released.
#include "prefetcher.hpp"

#include <algorithm>

namespace fanstore::daemon {

// Positions this far behind the furthest one read are taken as skipped (readers run a little out of order:
// DataLoader workers each take a batch).
constexpr uint64_t kReorderSlack = 1024;

Prefetcher::Stream* Prefetcher::Find(uint64_t id) {
  for (Stream& s : streams_)
    if (s.id == id) return &s;
  return nullptr;
}

std::vector<ByteRange> Prefetcher::Hint(uint64_t id, std::vector<ByteRange> ranges, bool append) {
  std::vector<ByteRange> released;
  hinted_ += ranges.size();
  Stream* s = Find(id);
  if (s && append) {
    s->order.insert(s->order.end(), ranges.begin(), ranges.end());
    return released;
  }
  if (s) {
    for (auto& a : s->ahead)
      if (!a.done) released.push_back(a.range);
    s->order = std::move(ranges);
    s->next = s->read_to = 0;
    s->ahead.clear();
    return released;
  }
  if (streams_.size() >= max_streams_) {
    for (auto& a : streams_.front().ahead)
      if (!a.done) released.push_back(a.range);
    streams_.pop_front();
  }
  Stream n;
  n.id = id;
  n.order = std::move(ranges);
  streams_.push_back(std::move(n));
  return released;
}

std::optional<Prefetcher::Item> Prefetcher::Next(const std::function<bool(const ByteRange&)>& skip) {
  for (size_t tried = 0; tried < streams_.size(); ++tried) {
    Stream& s = streams_[(turn_ + tried) % streams_.size()];
    while (s.next < s.order.size() && s.next < s.read_to + max_ahead_) {
      size_t i = s.next++;
      if (skip(s.order[i])) continue;
      s.ahead.push_back({i, s.order[i], false});
      turn_ = (turn_ + tried + 1) % streams_.size();  // the next call starts with the next stream
      return Item{s.order[i], s.id, i};
    }
  }
  return std::nullopt;
}

void Prefetcher::Settle(Stream* s, uint64_t index, std::vector<ByteRange>* passed) {
  auto it = std::lower_bound(s->ahead.begin(), s->ahead.end(), index,
                             [](const Stream::Ahead& a, uint64_t i) { return a.pos < i; });
  if (it != s->ahead.end() && it->pos == index) it->done = true;
  while (!s->ahead.empty()) {
    Stream::Ahead& f = s->ahead.front();
    if (!f.done && f.pos + kReorderSlack >= s->read_to) break;
    if (!f.done) passed->push_back(f.range);
    s->ahead.pop_front();
  }
}

std::vector<ByteRange> Prefetcher::Consumed(uint64_t id, uint64_t index) {
  std::vector<ByteRange> passed;
  Stream* s = Find(id);
  if (!s) return passed;
  s->read_to = std::max<size_t>(s->read_to, static_cast<size_t>(index) + 1);
  Settle(s, index, &passed);
  return passed;
}

std::vector<ByteRange> Prefetcher::Dropped(uint64_t id, uint64_t index) {
  std::vector<ByteRange> passed;
  Stream* s = Find(id);
  if (s) Settle(s, index, &passed);
  return passed;
}

}  // namespace fanstore::daemon
