// NodeCache: ranges by (partition, start offset) with containment lookup; two lists decide eviction order.
#include "node_cache.hpp"

namespace fanstore::daemon {

const NodeCache::List::iterator* NodeCache::Locate(const ByteRange& r) const {
  auto p = index_.find(r.part);
  if (p == index_.end() || p->second.empty()) return nullptr;
  auto it = p->second.upper_bound(r.offset);  // first range starting after r.offset
  if (it == p->second.begin()) return nullptr;
  --it;
  const Node& n = *it->second;
  if (n.range.end() < r.end() || r.offset < n.range.offset) return nullptr;
  return &it->second;
}

bool NodeCache::Contains(const ByteRange& r) const { return Locate(r) != nullptr; }

const char* NodeCache::Find(const ByteRange& r, Tag* consumed) {
  *consumed = Tag{};
  const List::iterator* loc = Locate(r);
  if (!loc) return nullptr;
  List::iterator it = *loc;
  if (it->tag.prefetched) {
    *consumed = it->tag;
    it->tag = Tag{};
    tagged_ -= it->range.length;
    lru_.splice(lru_.begin(), tagged_list_, it);
  } else {
    lru_.splice(lru_.begin(), lru_, it);
  }
  return it->buf.data + (r.offset - it->range.offset);
}

void NodeCache::Untag(const ByteRange& r) {
  auto p = index_.find(r.part);
  if (p == index_.end()) return;
  auto f = p->second.find(r.offset);
  if (f == p->second.end() || !(f->second->range == r) || !f->second->tag.prefetched) return;
  List::iterator it = f->second;
  it->tag = Tag{};
  tagged_ -= it->range.length;
  // Not read, so not recently used: it goes to the cold end.
  lru_.splice(lru_.end(), tagged_list_, it);
}

void NodeCache::Erase(List::iterator it, List* from) {
  auto p = index_.find(it->range.part);
  if (p != index_.end()) {
    p->second.erase(it->range.offset);
    if (p->second.empty()) index_.erase(p);
  }
  used_ -= it->range.length;
  if (it->tag.prefetched) tagged_ -= it->range.length;
  from->erase(it);
}

bool NodeCache::EvictOne() {
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

bool NodeCache::Insert(const ByteRange& r, CacheBuffer buf, Tag tag) {
  if (!Admits(r.length)) return false;
  auto p = index_.find(r.part);
  if (p != index_.end() && p->second.count(r.offset)) return false;
  // A range already covered by a bigger cached one needs no second copy.
  if (Contains(r)) return false;
  while (used_ + r.length > budget_)
    if (!EvictOne()) return false;
  List& into = tag.prefetched ? tagged_list_ : lru_;
  auto it = tag.prefetched ? into.insert(into.end(), Node{r, std::move(buf), tag})
                           : into.insert(into.begin(), Node{r, std::move(buf), tag});
  index_[r.part][r.offset] = it;
  used_ += r.length;
  if (tag.prefetched) tagged_ += r.length;
  return true;
}

}  // namespace fanstore::daemon
