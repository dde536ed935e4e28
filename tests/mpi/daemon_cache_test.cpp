// Unit tests of the daemon's bookkeeping, no MPI: the fetch cache (containment, eviction order, tags), the
// prefetch cursor (order, look-ahead bound, replaced hints, passed-by ranges), peer liveness, slab blocks.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>

#include <sys/mman.h>

#include "fanstore/protocol/fetch_cache_view.hpp"
#include "fetch_cache.hpp"
#include "peer_table.hpp"
#include "prefetcher.hpp"

namespace fanstore::daemon {
namespace {

CacheBuffer Filled(FetchCache& cache, uint64_t n, char c) {
  CacheBuffer b = cache.Allocate(n);
  if (b.mem) std::memset(b.mem.data(), c, n);
  return b;
}

TEST(FetchCache, FindsContainedRangesOnly) {
  FetchCache cache(1 << 20);
  ASSERT_TRUE(cache.Insert({3, 1000, 100}, Filled(cache, 100, 'a'), {}));
  FetchCache::Tag t;
  EXPECT_NE(cache.Find({3, 1000, 100}, &t), nullptr);
  const char* mid = cache.Find({3, 1010, 20}, &t);  // a chunk of the cached range
  ASSERT_NE(mid, nullptr);
  EXPECT_EQ(mid[0], 'a');
  EXPECT_EQ(cache.Find({3, 990, 20}, &t), nullptr);    // starts before
  EXPECT_EQ(cache.Find({3, 1090, 20}, &t), nullptr);   // runs past the end
  EXPECT_EQ(cache.Find({4, 1000, 100}, &t), nullptr);  // other partition
  EXPECT_FALSE(cache.Insert({3, 1000, 100}, Filled(cache, 100, 'b'), {})) << "a cached range is not cached twice";
  EXPECT_FALSE(cache.Insert({3, 1020, 10}, Filled(cache, 10, 'b'), {})) << "nor a range inside a cached one";
}

// Bytes a client found damaged: every cached range that overlaps them goes, nothing else, tagged ones included.
TEST(FetchCache, RemoveForgetsEveryRangeThatOverlaps) {
  FetchCache cache(1 << 20);
  ASSERT_TRUE(cache.Insert({3, 0, 100}, Filled(cache, 100, 'a'), {}));
  ASSERT_TRUE(cache.Insert({3, 100, 100}, Filled(cache, 100, 'b'), {true, 1, 0}));
  ASSERT_TRUE(cache.Insert({3, 200, 100}, Filled(cache, 100, 'c'), {}));
  ASSERT_TRUE(cache.Insert({4, 100, 100}, Filled(cache, 100, 'd'), {}));
  const uint64_t used = cache.used();
  cache.Remove({3, 150, 60});  // inside 'b', into 'c'
  FetchCache::Tag t;
  EXPECT_NE(cache.Find({3, 0, 100}, &t), nullptr);
  EXPECT_EQ(cache.Find({3, 100, 100}, &t), nullptr);
  EXPECT_EQ(cache.Find({3, 200, 100}, &t), nullptr);
  EXPECT_NE(cache.Find({4, 100, 100}, &t), nullptr);
  EXPECT_EQ(cache.used(), used - 200);
  EXPECT_EQ(cache.tagged_bytes(), 0u);
  cache.Remove({3, 0, 100});
  cache.Remove({9, 0, 100});  // nothing cached there
  EXPECT_EQ(cache.Find({3, 0, 100}, &t), nullptr);
  EXPECT_EQ(cache.used(), used - 300);
  EXPECT_TRUE(cache.Insert({3, 100, 100}, Filled(cache, 100, 'e'), {})) << "the range can be cached again";
}

TEST(FetchCache, RangesWhoseEndWrapsPast2To64AreNotFound) {
  // offset + length wraps to a small end: the old containment test (ends compared) took these for hits and
  // answered with memory before the cached range, or crashed copying 256 MiB of it (a range that wrapped past 2^64).
  FetchCache cache(1 << 20);
  ASSERT_TRUE(cache.Insert({3, 1000, 100}, Filled(cache, 100, 'a'), {}));
  FetchCache::Tag t;
  for (uint64_t len : {uint64_t{200}, uint64_t{1} << 20, uint64_t{256} << 20, ~uint64_t{0}}) {
    const ByteRange wrapped{3, 0 - len + 100, len};
    EXPECT_EQ(cache.Find(wrapped, &t), nullptr) << len;
    EXPECT_FALSE(cache.Contains(wrapped)) << len;
  }
  EXPECT_FALSE(cache.Contains({3, 1050, ~uint64_t{0} - 10})) << "inside at the start, wrapping past the end";
  EXPECT_TRUE(cache.Contains({3, 1099, 1}));
}

TEST(FetchCache, EvictsLeastRecentlyUsedAndPrefetchedLast) {
  FetchCache cache(400);  // admits ranges up to 100 bytes
  EXPECT_FALSE(cache.Admits(101));
  FetchCache::Tag pf{true, 1, 0};
  ASSERT_TRUE(cache.Insert({0, 0, 100}, Filled(cache, 100, 'p'), pf));  // prefetched, not read yet
  ASSERT_TRUE(cache.Insert({0, 100, 100}, Filled(cache, 100, 'a'), {}));
  ASSERT_TRUE(cache.Insert({0, 200, 100}, Filled(cache, 100, 'b'), {}));
  ASSERT_TRUE(cache.Insert({0, 300, 100}, Filled(cache, 100, 'c'), {}));
  FetchCache::Tag t;
  ASSERT_NE(cache.Find({0, 100, 100}, &t), nullptr);  // 'a' is now the most recently used
  ASSERT_TRUE(cache.Insert({0, 400, 100}, Filled(cache, 100, 'd'), {}));
  EXPECT_FALSE(cache.Contains({0, 200, 100})) << "'b' was the least recently used";
  EXPECT_TRUE(cache.Contains({0, 0, 100})) << "the prefetched range goes last";
  EXPECT_EQ(cache.tagged_bytes(), 100u);
  // Reading it consumes the tag (returned once).
  ASSERT_NE(cache.Find({0, 0, 100}, &t), nullptr);
  EXPECT_TRUE(t.prefetched);
  EXPECT_EQ(t.stream, 1u);
  ASSERT_NE(cache.Find({0, 0, 100}, &t), nullptr);
  EXPECT_FALSE(t.prefetched);
  EXPECT_EQ(cache.tagged_bytes(), 0u);
  EXPECT_LE(cache.used(), 400u);
}

TEST(FetchCache, UntaggedRangesGoToTheColdEnd) {
  FetchCache cache(400);
  ASSERT_TRUE(cache.Insert({0, 0, 100}, Filled(cache, 100, 'a'), {}));
  ASSERT_TRUE(cache.Insert({0, 100, 50}, Filled(cache, 50, 'p'), {true, 1, 5}));
  cache.Untag({0, 100, 50});  // the reader passed it by
  EXPECT_EQ(cache.tagged_bytes(), 0u);
  ASSERT_TRUE(cache.Insert({0, 200, 100}, Filled(cache, 100, 'b'), {}));
  ASSERT_TRUE(cache.Insert({0, 300, 100}, Filled(cache, 100, 'c'), {}));
  ASSERT_TRUE(cache.Insert({0, 400, 100}, Filled(cache, 100, 'd'), {}));  // 50 too many: the passed-by one goes first
  EXPECT_FALSE(cache.Contains({0, 100, 50}));
  EXPECT_TRUE(cache.Contains({0, 0, 100}));
}

TEST(FetchCache, ZeroBudgetKeepsNothing) {
  FetchCache cache(0);
  EXPECT_FALSE(cache.Admits(1));
  EXPECT_FALSE(cache.Insert({0, 0, 1}, Filled(cache, 1, 'x'), {}));
}

std::vector<ByteRange> Ranges(int n, uint32_t part = 0) {
  std::vector<ByteRange> v;
  for (int i = 0; i < n; ++i) v.push_back({part, static_cast<uint64_t>(i) * 100, 100});
  return v;
}

TEST(Prefetcher, FollowsTheHintWithinTheLookAhead) {
  Prefetcher p(/*max_ahead=*/3);
  ASSERT_TRUE(p.Hint(7, Ranges(10), false).ok());
  auto none = [](const ByteRange&) { return false; };
  uint64_t gen = 0;
  for (uint64_t i = 0; i < 3; ++i) {
    auto it = p.Next(none);
    ASSERT_TRUE(it);
    EXPECT_EQ(it->index, i);
    EXPECT_EQ(it->range.offset, i * 100);
    EXPECT_EQ(it->stream, 7u);
    gen = it->gen;
  }
  EXPECT_FALSE(p.Next(none)) << "three ahead of the reader at most";
  p.Consumed(7, gen, 0);
  auto it = p.Next(none);
  ASSERT_TRUE(it);
  EXPECT_EQ(it->index, 3u);
  // Ranges the caller has (cached, in flight) are skipped.
  p.Consumed(7, gen, 3);
  it = p.Next([](const ByteRange& r) { return r.offset == 400; });
  ASSERT_TRUE(it);
  EXPECT_EQ(it->index, 5u);
}

TEST(Prefetcher, ANewHintReplacesTheStreamAndReleasesWhatWasNotRead) {
  Prefetcher p;
  ASSERT_TRUE(p.Hint(1, Ranges(4), false).ok());
  auto none = [](const ByteRange&) { return false; };
  auto first = p.Next(none);
  ASSERT_TRUE(first);
  ASSERT_TRUE(p.Next(none));
  p.Consumed(1, first->gen, 0);
  auto released = p.Hint(1, Ranges(2, 9), false);  // the next epoch
  ASSERT_TRUE(released.ok());
  ASSERT_EQ(released->size(), 1u);  // position 1 was fetched, never read
  EXPECT_EQ((*released)[0].offset, 100u);
  auto it = p.Next(none);
  ASSERT_TRUE(it);
  EXPECT_EQ(it->range.part, 9u);
  EXPECT_EQ(it->index, 0u);
  EXPECT_EQ(p.streams(), 1u);
}

// A fetch of the previous epoch's hint that completes (or is read) after the next epoch's hint arrived must not
// count as the new hint's: it would move the new cursor, or stay tagged (holding the window) for good.
TEST(Prefetcher, FetchesOfAReplacedHintAreStale) {
  Prefetcher p(/*max_ahead=*/2);
  ASSERT_TRUE(p.Hint(1, Ranges(8), false).ok());
  auto none = [](const ByteRange&) { return false; };
  auto old = p.Next(none);
  ASSERT_TRUE(old);
  ASSERT_TRUE(p.Hint(1, Ranges(8, 5), false).ok());  // in flight meanwhile: position 0 of the old hint
  EXPECT_FALSE(p.Live(1, old->gen));
  EXPECT_TRUE(p.Consumed(1, old->gen, 6).empty());  // a reader reads the old fetch's range: nothing moves
  auto a = p.Next(none), b = p.Next(none);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(p.Live(1, a->gen));
  EXPECT_EQ(a->range.part, 5u);
  EXPECT_EQ(b->index, 1u);
  EXPECT_FALSE(p.Next(none)) << "the stale read must not have moved the new hint's reader to position 7";
}

// Appending to a hint forever must not grow the daemon without bound; other streams make room, in age order.
TEST(Prefetcher, HintedRangesAreBounded) {
  Prefetcher p(4096, 64, /*max_ranges=*/100);
  ASSERT_TRUE(p.Hint(1, Ranges(60, 1), false).ok());
  ASSERT_TRUE(p.Hint(2, Ranges(30, 2), false).ok());
  ASSERT_TRUE(p.Hint(2, Ranges(20, 2), true).ok());  // 110 in all: stream 1, the oldest, goes
  EXPECT_EQ(p.streams(), 1u);
  auto refused = p.Hint(2, Ranges(60, 2), true);  // 110 in stream 2 alone
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(p.streams(), 1u);
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(p.Hint(2, Ranges(60, 2), true).ok());
  ASSERT_TRUE(p.Hint(2, Ranges(100, 2), false).ok()) << "a replacing hint up to the bound is fine";
}

TEST(Prefetcher, AStreamNobodyReadsYieldsTheWindowToAnActiveOne) {
  const int64_t s = 1000000;
  Prefetcher p;
  auto none = [](const ByteRange&) { return false; };
  ASSERT_TRUE(p.Hint(1, Ranges(10, 1), false, 0).ok());
  ASSERT_TRUE(p.Next(none) && p.Next(none));  // fetched ahead; its reader then stops
  // Alone, a paused reader (a long first step) keeps its hint however long it pauses.
  EXPECT_TRUE(p.ReleaseIdle(60 * s, 10 * s).empty());
  ASSERT_TRUE(p.Hint(2, Ranges(10, 2), false, 60 * s).ok());  // another reader starts
  EXPECT_TRUE(p.ReleaseIdle(61 * s, 100 * s).empty()) << "not idle for that long yet";
  auto released = p.ReleaseIdle(61 * s, 10 * s);
  EXPECT_EQ(released.size(), 2u) << "stream 1's ranges fetched ahead are released";
  EXPECT_EQ(p.streams(), 1u);
  for (int i = 0; i < 10; ++i) {
    auto it = p.Next(none);
    if (!it) break;
    EXPECT_EQ(it->range.part, 2u);
  }
  // Two readers that both pause: neither is taken from the other.
  Prefetcher q;
  ASSERT_TRUE(q.Hint(1, Ranges(10, 1), false, 0).ok());
  ASSERT_TRUE(q.Hint(2, Ranges(10, 2), false, 0).ok());
  ASSERT_TRUE(q.Next(none) && q.Next(none));
  EXPECT_TRUE(q.ReleaseIdle(60 * s, 10 * s).empty());
  EXPECT_EQ(q.streams(), 2u);
}

TEST(Prefetcher, RangesThePassedByAreReleased) {
  Prefetcher p(/*max_ahead=*/5000);
  ASSERT_TRUE(p.Hint(1, Ranges(3000), false).ok());
  auto none = [](const ByteRange&) { return false; };
  uint64_t gen = 0;
  for (int i = 0; i < 2000; ++i) {
    auto it = p.Next(none);
    ASSERT_TRUE(it);
    gen = it->gen;
  }
  // The reader skipped position 0 and read far beyond it.
  std::vector<ByteRange> passed;
  for (uint64_t i = 1; i < 1500; ++i) {
    auto v = p.Consumed(1, gen, i);
    passed.insert(passed.end(), v.begin(), v.end());
  }
  ASSERT_EQ(passed.size(), 1u);
  EXPECT_EQ(passed[0].offset, 0u);
}

TEST(Prefetcher, StreamsTakeTurnsAndTheOldestIsForgotten) {
  Prefetcher p(100, /*max_streams=*/2);
  ASSERT_TRUE(p.Hint(1, Ranges(5, 1), false).ok());
  ASSERT_TRUE(p.Hint(2, Ranges(5, 2), false).ok());
  auto none = [](const ByteRange&) { return false; };
  std::set<uint32_t> parts;
  for (int i = 0; i < 4; ++i) parts.insert(p.Next(none)->range.part);
  EXPECT_EQ(parts, (std::set<uint32_t>{1, 2}));
  ASSERT_TRUE(p.Hint(3, Ranges(5, 3), false).ok());
  EXPECT_EQ(p.streams(), 2u);
  for (int i = 0; i < 10; ++i) {
    auto it = p.Next(none);
    if (!it) break;
    EXPECT_NE(it->range.part, 1u) << "stream 1 was the oldest";
  }
}

TEST(PeerTable, DownOnceUntilHeardAndOneProbe) {
  PeerTable t(4);
  EXPECT_TRUE(t.up(1));
  t.Heard(1, 100);
  EXPECT_FALSE(t.TimedOut(1, 50, 1000)) << "it answered after being asked: busy, not dead";
  EXPECT_TRUE(t.up(1));
  EXPECT_TRUE(t.TimedOut(1, 200, 1000));
  EXPECT_FALSE(t.up(1));
  EXPECT_FALSE(t.TimedOut(1, 300, 2000)) << "declared down once";
  EXPECT_TRUE(t.TakeProbe(1));
  EXPECT_FALSE(t.TakeProbe(1)) << "one probe per down event";
  EXPECT_TRUE(t.Heard(1, 3000));
  EXPECT_TRUE(t.up(1));
  EXPECT_FALSE(t.Heard(1, 3001));
}

// A client's view of the cache memfd, mapped the way daemon_client.cpp maps it.
struct ClientView {
  fetch_cache_view::View view;
  void* map = nullptr;
  size_t len = 0;
  explicit ClientView(int fd) {
    struct stat st;
    EXPECT_EQ(fstat(fd, &st), 0);
    len = static_cast<size_t>(st.st_size);
    map = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(map, MAP_FAILED);
    EXPECT_TRUE(view.Attach(static_cast<char*>(map), len));
  }
  ~ClientView() { munmap(map, len); }
};

TEST(SharedCache, ClientsCopyPublishedRangesUntilTheyAreEvicted) {
  FetchCache cache(4 << 20);
  ASSERT_GE(cache.shared_fd(), 0);
  ClientView c(cache.shared_fd());
  std::string got(100000, '\0');
  ASSERT_TRUE(cache.Insert({2, 8192, 100000}, Filled(cache, 100000, 'x'), {true, 5, 7}));
  ASSERT_TRUE(c.view.Copy(2, 8192, 100000, got.data()));
  EXPECT_EQ(got, std::string(100000, 'x'));
  EXPECT_FALSE(c.view.Copy(2, 8192, 99999, got.data())) << "only the exact range is indexed";
  EXPECT_FALSE(c.view.Copy(3, 8192, 100000, got.data()));
  // The client's read is the prefetcher's news: the tag goes, once.
  auto reads = cache.TakeSharedReads();
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].stream, 5u);
  EXPECT_EQ(reads[0].index, 7u);
  EXPECT_TRUE(cache.TakeSharedReads().empty());
  EXPECT_EQ(cache.tagged_bytes(), 0u);
  EXPECT_EQ(cache.SharedHits(), 1u);
  // Evicted (by ranges that need its room): withdrawn from the index before its memory is reused.
  for (uint64_t i = 0; i < 40; ++i) cache.Insert({9, i << 20, 1 << 20}, Filled(cache, 1 << 20, 'y'), {});
  EXPECT_FALSE(cache.Contains({2, 8192, 100000}));
  EXPECT_FALSE(c.view.Copy(2, 8192, 100000, got.data()));
  EXPECT_EQ(cache.SharedHits(), 1u) << "hits of withdrawn ranges still count";
}

TEST(SharedCache, AClobberedHeaderIsNotACache) {
  FetchCache cache(2 << 20);
  int fd = cache.shared_fd();
  ASSERT_GE(fd, 0);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  std::string copy(static_cast<size_t>(st.st_size), '\0');
  ASSERT_EQ(pread(fd, copy.data(), copy.size(), 0), static_cast<ssize_t>(copy.size()));
  fetch_cache_view::View v;
  EXPECT_TRUE(v.Attach(copy.data(), copy.size()));
  fetch_cache_view::Header h;
  std::memcpy(&h, copy.data(), sizeof h);
  h.data_len = ~uint64_t{0};
  std::memcpy(copy.data(), &h, sizeof h);
  fetch_cache_view::View w;
  EXPECT_FALSE(w.Attach(copy.data(), copy.size()));
}

TEST(SharedArena, BlocksComeBackAndWholeChunksServeBigRanges) {
  Status why;
  auto a = SharedArena::Create(8 << 20, &why);  // four 2 MiB chunks
  ASSERT_TRUE(a) << why.ToString();
  std::vector<ArenaBlock> small;
  for (int i = 0; i < 16; ++i) small.push_back(a->Allocate(128 << 10));  // one chunk of 128 KiB blocks
  ArenaBlock big = a->Allocate(5 << 20);                                 // needs three whole chunks: all that is left
  ASSERT_TRUE(big);
  EXPECT_EQ(big.capacity(), 6u << 20);
  EXPECT_FALSE(a->Allocate(4096)) << "no chunk left for another class";
  small.clear();  // the 128 KiB chunk is wholly free again
  ArenaBlock one = a->Allocate(4096);
  EXPECT_TRUE(one);
  big = ArenaBlock();
  ArenaBlock again = a->Allocate(6 << 20);  // the three chunks the run gave back
  EXPECT_TRUE(again);
  EXPECT_FALSE(a->Allocate(8 << 20)) << "one chunk holds a 4 KiB block";
}

}  // namespace
}  // namespace fanstore::daemon
