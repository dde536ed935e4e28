#include "prefetcher.hpp"

#include <algorithm>
#include <string>

namespace fanstore::daemon {

// Positions this far behind the furthest one read are taken as skipped (readers run a little out of order:
// DataLoader workers each take a batch).
constexpr uint64_t kReorderSlack = 1024;

Prefetcher::Stream* Prefetcher::Find(uint64_t id) {
  for (Stream& s : streams_)
    if (s.id == id) return &s;
  return nullptr;
}

Prefetcher::Stream* Prefetcher::Find(uint64_t id, uint64_t gen) {
  Stream* s = Find(id);
  return s && s->gen == gen ? s : nullptr;
}

bool Prefetcher::Live(uint64_t id, uint64_t gen) const {
  for (const Stream& s : streams_)
    if (s.id == id) return s.gen == gen;
  return false;
}

size_t Prefetcher::TotalRanges() const {
  size_t n = 0;
  for (const Stream& s : streams_) n += s.order.size();
  return n;
}

void Prefetcher::Forget(size_t i, std::vector<ByteRange>* released) {
  for (auto& a : streams_[i].ahead)
    if (!a.done) released->push_back(a.range);
  streams_.erase(streams_.begin() + static_cast<std::ptrdiff_t>(i));
  if (turn_ > i) --turn_;
  if (turn_ >= streams_.size()) turn_ = 0;
}

Result<std::vector<ByteRange>> Prefetcher::Hint(uint64_t id, std::vector<ByteRange> ranges, bool append,
                                                int64_t now_us) {
  std::vector<ByteRange> released;
  Stream* s = Find(id);
  size_t keep = (s && append ? s->order.size() : 0) + ranges.size();
  if (keep > max_ranges_)
    return Status(Code::kInvalidArgument, "prefetch hint too long: stream " + std::to_string(id) + " would hold " +
                                              std::to_string(keep) + " files, at most " + std::to_string(max_ranges_) +
                                              " are kept (send each epoch's order as a new hint instead of appending)");
  // Room first: the oldest other streams go (what this one replaces does not count).
  size_t other = TotalRanges() - (s ? s->order.size() : 0);
  while (other + keep > max_ranges_) {
    size_t victim = 0;
    while (streams_[victim].id == id) ++victim;  // exists: other > 0 here
    other -= streams_[victim].order.size();
    Forget(victim, &released);
  }
  s = Find(id);
  if (s && append) {
    s->order.insert(s->order.end(), ranges.begin(), ranges.end());
    s->active_us = now_us;
    return released;
  }
  if (!s) {
    if (streams_.size() >= max_streams_) Forget(0, &released);
    s = &streams_.emplace_back();
    s->id = id;
  }
  // A new order replaces the stream's: what it fetched ahead and nobody read is released.
  for (auto& a : s->ahead)
    if (!a.done) released.push_back(a.range);
  s->order = std::move(ranges);
  s->gen = next_gen_++;
  s->next = s->read_to = 0;
  s->ahead.clear();
  s->active_us = now_us;
  return released;
}

std::optional<Prefetcher::Item> Prefetcher::Next(const std::function<bool(const ByteRange&)>& skip) {
  for (size_t tried = 0; tried < streams_.size(); ++tried) {
    Stream& s = streams_[(turn_ + tried) % streams_.size()];
    while (s.HasWork(max_ahead_)) {
      size_t i = s.next++;
      if (skip(s.order[i])) continue;
      s.ahead.push_back({i, s.order[i], false});
      turn_ = (turn_ + tried + 1) % streams_.size();  // the next call starts with the next stream
      return Item{s.order[i], s.id, s.gen, i};
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

std::vector<ByteRange> Prefetcher::Consumed(uint64_t id, uint64_t gen, uint64_t index, int64_t now_us) {
  std::vector<ByteRange> passed;
  Stream* s = Find(id, gen);
  if (!s || index >= s->order.size()) return passed;
  s->read_to = std::max<size_t>(s->read_to, static_cast<size_t>(index) + 1);
  s->active_us = std::max(s->active_us, now_us);
  Settle(s, index, &passed);
  return passed;
}

std::vector<ByteRange> Prefetcher::Dropped(uint64_t id, uint64_t gen, uint64_t index) {
  std::vector<ByteRange> passed;
  Stream* s = Find(id, gen);
  if (s) Settle(s, index, &passed);
  return passed;
}

std::vector<ByteRange> Prefetcher::ReleaseIdle(int64_t now_us, int64_t idle_us) {
  std::vector<ByteRange> released;
  bool wanted = false;  // an active stream has more to fetch
  for (const Stream& s : streams_)
    if (now_us - s.active_us < idle_us && s.HasWork(max_ahead_)) wanted = true;
  if (!wanted) return released;
  for (size_t i = streams_.size(); i-- > 0;) {
    const Stream& s = streams_[i];
    bool holds = std::any_of(s.ahead.begin(), s.ahead.end(), [](const Stream::Ahead& a) { return !a.done; });
    if (now_us - s.active_us >= idle_us && holds) Forget(i, &released);
  }
  return released;
}

}  // namespace fanstore::daemon
