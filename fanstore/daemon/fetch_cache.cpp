#include "fetch_cache.hpp"

namespace fanstore::daemon {

FetchCache::FetchCache(uint64_t budget_bytes, Status* why) : budget_(budget_bytes) {
  if (budget_ == 0) return;
  Status s;
  arena_ = SharedArena::Create(budget_, &s);
  if (!arena_) {
    budget_ = 0;
    if (why) *why = s;
  }
}

CacheBuffer FetchCache::Allocate(uint64_t n) {
  CacheBuffer b;
  if (!arena_) return b;
  // Cold ranges make room; bounded, so one allocation never empties a cache of tiny ranges for a big one.
  for (int evicted = 0; evicted <= 4096; ++evicted) {
    b.mem = arena_->Allocate(n);
    if (b.mem || !EvictOne()) break;
  }
  b.data = b.mem ? b.mem.data() : nullptr;
  return b;
}

std::vector<FetchCache::Tag> FetchCache::TakeSharedReads() {
  std::vector<Tag> read;
  if (!arena_) return read;
  for (auto it = tagged_list_.begin(); it != tagged_list_.end();) {
    auto cur = it++;
    if (arena_->Hits(cur->slot) == 0) continue;
    read.push_back(cur->tag);
    DropTag(cur, lru_.begin());
  }
  return read;
}

uint64_t FetchCache::SharedHits() const {
  uint64_t n = withdrawn_hits_;
  if (!arena_) return n;
  for (const List* l : {&lru_, &tagged_list_})
    for (const Node& node : *l) n += arena_->Hits(node.slot);
  return n;
}

const FetchCache::List::iterator* FetchCache::Locate(const ByteRange& r) const {
  auto p = index_.find(r.part);
  if (p == index_.end() || p->second.empty()) return nullptr;
  auto it = p->second.upper_bound(r.offset);  // first range starting after r.offset
  if (it == p->second.begin()) return nullptr;
  --it;
  if (!it->second->range.Contains(r)) return nullptr;
  return &it->second;
}

bool FetchCache::Contains(const ByteRange& r) const { return Locate(r) != nullptr; }

const char* FetchCache::Find(const ByteRange& r, Tag* consumed) {
  *consumed = Tag{};
  const List::iterator* loc = Locate(r);
  if (!loc) return nullptr;
  List::iterator it = *loc;
  if (it->tag.prefetched) {
    *consumed = it->tag;
    DropTag(it, lru_.begin());
  } else {
    lru_.splice(lru_.begin(), lru_, it);
  }
  return it->buf.data + (r.offset - it->range.offset);
}

void FetchCache::Remove(const ByteRange& r) {
  auto p = index_.find(r.part);
  if (p == index_.end()) return;
  std::vector<List::iterator> bad;  // a rare event: every range of the partition that starts before r's end
  for (auto it = p->second.begin(); it != p->second.end() && it->first < r.offset + r.length; ++it)
    if (it->first + it->second->range.length > r.offset) bad.push_back(it->second);
  for (List::iterator node : bad) Erase(node, node->tag.prefetched ? &tagged_list_ : &lru_);
}

void FetchCache::Untag(const ByteRange& r) {
  auto p = index_.find(r.part);
  if (p == index_.end()) return;
  auto f = p->second.find(r.offset);
  if (f == p->second.end() || !(f->second->range == r) || !f->second->tag.prefetched) return;
  DropTag(f->second, lru_.end());  // not read, so not recently used: the cold end
}

void FetchCache::DropTag(List::iterator it, List::iterator to) {
  it->tag = Tag{};
  tagged_ -= it->range.length;
  lru_.splice(to, tagged_list_, it);
}

void FetchCache::Erase(List::iterator it, List* from) {
  // Out of the shared index first: from here on no client completes a copy of it, and its memory can go.
  if (arena_ && it->slot >= 0) {
    withdrawn_hits_ += arena_->Hits(it->slot);
    arena_->Withdraw(it->slot);
  }
  auto p = index_.find(it->range.part);
  if (p != index_.end()) {
    p->second.erase(it->range.offset);
    if (p->second.empty()) index_.erase(p);
  }
  used_ -= it->range.length;
  if (it->tag.prefetched) tagged_ -= it->range.length;
  from->erase(it);
}

bool FetchCache::EvictOne() {
  if (!lru_.empty()) {
    Erase(std::prev(lru_.end()), &lru_);
    return true;
  }
  if (!tagged_list_.empty()) {
    Erase(tagged_list_.begin(), &tagged_list_);
    return true;
  }
  return false;
}

bool FetchCache::Insert(const ByteRange& r, CacheBuffer buf, Tag tag) {
  if (!Admits(r.length) || !arena_ || !buf.mem) return false;
  // One entry per start offset; a range already covered by a bigger cached one needs no second copy.
  auto p = index_.find(r.part);
  if ((p != index_.end() && p->second.count(r.offset)) || Contains(r)) return false;
  while (used_ + r.length > budget_)
    if (!EvictOne()) return false;
  List& into = tag.prefetched ? tagged_list_ : lru_;
  auto it = into.insert(tag.prefetched ? into.end() : into.begin(), Node{r, std::move(buf), tag, -1});
  it->slot = arena_->Publish(r.part, r.offset, r.length, it->buf.data);
  index_[r.part][r.offset] = it;
  used_ += r.length;
  if (tag.prefetched) tagged_ += r.length;
  return true;
}

}  // namespace fanstore::daemon
