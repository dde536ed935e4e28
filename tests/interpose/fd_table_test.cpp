// Unit tests of the interposer's fd -> entry table (no preload, no image).
#include "fd_table.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace fanstore::interpose {
namespace {

TEST(FdTable, TrackCopyClear) {
  uint32_t id = 0;
  EXPECT_FALSE(FdTable::Lookup(10, &id));
  ASSERT_TRUE(FdTable::Track(10, 0));  // entry 0 (the image root) must be distinguishable from "not ours"
  ASSERT_TRUE(FdTable::Lookup(10, &id));
  EXPECT_EQ(id, 0u);
  FdTable::Copy(10, 11);  // dup
  ASSERT_TRUE(FdTable::Lookup(11, &id));
  EXPECT_EQ(id, 0u);
  FdTable::Clear(10);
  EXPECT_FALSE(FdTable::Lookup(10, &id));
  EXPECT_TRUE(FdTable::Lookup(11, &id));
  FdTable::Copy(10, 11);  // dup2 of an untracked fd over a tracked one forgets it
  EXPECT_FALSE(FdTable::Lookup(11, &id));
  EXPECT_GE(FdTable::HighWater(), 12);
}

TEST(FdTable, InternalFdsAreNotOurs) {
  FdTable::MarkInternal(20);
  uint32_t id;
  EXPECT_FALSE(FdTable::Lookup(20, &id));
  EXPECT_EQ(FdTable::Raw(20), FdTable::kInternal);
  FdTable::Clear(20);
  EXPECT_EQ(FdTable::Raw(20), 0u);
}

TEST(FdTable, OutOfRangeIsRefusedNotCorrupting) {
  EXPECT_FALSE(FdTable::Track(FdTable::kCapacity, 5));
  EXPECT_FALSE(FdTable::Track(-1, 5));
  uint32_t id;
  EXPECT_FALSE(FdTable::Lookup(FdTable::kCapacity, &id));
  EXPECT_FALSE(FdTable::Lookup(-1, &id));
  FdTable::Clear(-1);
  FdTable::Copy(3, FdTable::kCapacity);
}

TEST(FdTable, VisibleAcrossThreads) {
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([t] {
      for (int i = 0; i < 1000; ++i) FdTable::Track(1000 + t * 1000 + i, static_cast<uint32_t>(t * 1000 + i));
    });
  for (auto& t : ts) t.join();
  for (int i = 0; i < 4000; ++i) {
    uint32_t id;
    ASSERT_TRUE(FdTable::Lookup(1000 + i, &id));
    EXPECT_EQ(id, static_cast<uint32_t>(i));
    FdTable::Clear(1000 + i);
  }
}

}  // namespace
}  // namespace fanstore::interpose
