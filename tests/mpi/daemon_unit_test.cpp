// Unit tests of the daemon's pure parts: replica placement / read order and the socket message encoding.
#include <gtest/gtest.h>

#include <set>

#include "daemon_protocol.hpp"
#include "placement.hpp"

namespace fanstore {
namespace {

using daemon::Holders;
using daemon::ReadOrder;

TEST(Placement, OneReplicaIsPartitionModRanks) {
  for (uint32_t p = 0; p < 10; ++p) EXPECT_EQ(Holders(p, 10, 4, 1), std::vector<int>{static_cast<int>(p % 4)});
}

TEST(Placement, ReplicatedPartitionIsEverywhere) { EXPECT_EQ(Holders(8, 8, 3, 1), (std::vector<int>{0, 1, 2})); }

TEST(Placement, ReplicasAreDistinctAndCapped) {
  EXPECT_EQ(Holders(3, 99, 4, 2), (std::vector<int>{3, 0}));
  auto h = Holders(1, 99, 3, 7);  // more replicas than ranks: every rank once
  EXPECT_EQ(std::set<int>(h.begin(), h.end()).size(), 3u);
  EXPECT_EQ(h.size(), 3u);
}

TEST(Placement, ReadOrderSkipsSelfAndRotatesByKey) {
  EXPECT_EQ(ReadOrder(0, 3, 99, 4, 2, 1), (std::vector<int>{3, 0}));
  EXPECT_EQ(ReadOrder(1, 3, 99, 4, 2, 1), (std::vector<int>{0, 3}));
  EXPECT_EQ(ReadOrder(1, 3, 99, 4, 2, 0), (std::vector<int>{3}));
  EXPECT_TRUE(ReadOrder(5, 1, 99, 1, 1, 0).empty());  // only this rank holds it
}

TEST(Protocol, RequestRoundTrip) {
  namespace dp = daemon_proto;
  unsigned char b[dp::kRequestSize];
  dp::Request in;
  in.type = dp::MsgType::kFetch;
  in.req_id = 0x1122334455667788ull;
  in.part = 42;
  in.offset = 1ull << 40;
  in.length = 131072;
  dp::EncodeRequest(in, b);
  dp::Request r;
  ASSERT_TRUE(dp::DecodeRequest(b, &r));
  EXPECT_EQ(r.req_id, 0x1122334455667788ull);
  EXPECT_EQ(r.part, 42u);
  EXPECT_EQ(r.offset, 1ull << 40);
  EXPECT_EQ(r.length, 131072u);
  b[0] ^= 1;
  EXPECT_FALSE(dp::DecodeRequest(b, &r));
  // Only a prefetch carries a body.
  in.body_len = 10;
  dp::EncodeRequest(in, b);
  EXPECT_FALSE(dp::DecodeRequest(b, &r));
  dp::Request h;
  h.type = dp::MsgType::kPrefetch;
  h.stream = 77;
  h.flags = dp::kAppend;
  h.body_len = 10;
  dp::EncodeRequest(h, b);
  ASSERT_TRUE(dp::DecodeRequest(b, &r));
  EXPECT_EQ(r.stream, 77u);
  EXPECT_EQ(r.flags, dp::kAppend);
  EXPECT_EQ(r.body_len, 10u);
  // A version-1 client is told apart (fanstore version mismatch), never misread.
  b[4] = 1;
  EXPECT_FALSE(dp::DecodeRequest(b, &r));
}

TEST(Protocol, PrefetchBodyAndCounts) {
  namespace dp = daemon_proto;
  auto p = dp::SplitPaths("a/b\n\nc d\nlast");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], "a/b");
  EXPECT_EQ(p[1], "c d");
  EXPECT_EQ(p[2], "last");
  dp::PrefetchCounts c{3, 4, 5, 1ull << 35}, d;
  ASSERT_TRUE(dp::DecodePrefetchCounts(dp::EncodePrefetchCounts(c), &d));
  EXPECT_EQ(d.remote, 3u);
  EXPECT_EQ(d.missing, 5u);
  EXPECT_EQ(d.remote_bytes, 1ull << 35);
  EXPECT_FALSE(dp::DecodePrefetchCounts("x", &d));
}

TEST(Protocol, ReplyHeaderAndHelloRoundTrip) {
  daemon_proto::ReplyHeader h;
  h.req_id = 7;
  h.code = Code::kTimeout;
  h.msg_len = 3;
  h.payload_size = 1ull << 33;
  h.flags = daemon_proto::kPayloadInMemfd;
  h.shm_offset = 48;
  unsigned char b[daemon_proto::kReplyHeaderSize];
  daemon_proto::EncodeReplyHeader(h, b);
  daemon_proto::ReplyHeader g;
  ASSERT_TRUE(daemon_proto::DecodeReplyHeader(b, &g));
  EXPECT_EQ(g.code, Code::kTimeout);
  EXPECT_EQ(g.payload_size, 1ull << 33);
  EXPECT_EQ(g.shm_offset, 48u);
  daemon_proto::HelloInfo hi{2, 4, 5000, daemon_proto::kHelloStaged, "/nvme/x", "/nvme/x", {}};
  daemon_proto::HelloInfo ho;
  ASSERT_TRUE(daemon_proto::DecodeHello(daemon_proto::EncodeHello(hi), &ho));
  EXPECT_EQ(ho.rank, 2u);
  EXPECT_EQ(ho.flags, daemon_proto::kHelloStaged);
  EXPECT_EQ(ho.index_dir, "/nvme/x");
  EXPECT_TRUE(ho.unstaged.empty());
  EXPECT_FALSE(daemon_proto::DecodeHello("short", &ho));
  // Staging over with ranks that did not report: their list follows the directories, exactly.
  hi.flags = daemon_proto::kHelloUnstaged;
  hi.unstaged = {1, 3};
  const std::string wire = daemon_proto::EncodeHello(hi);
  ASSERT_TRUE(daemon_proto::DecodeHello(wire, &ho));
  EXPECT_EQ(ho.unstaged, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(ho.partition_dir, "/nvme/x");
  EXPECT_FALSE(daemon_proto::DecodeHello(wire.substr(0, wire.size() - 1), &ho));
  EXPECT_FALSE(daemon_proto::DecodeHello(wire + "x", &ho));
  EXPECT_FALSE(daemon_proto::DecodeHello(wire.substr(0, wire.size() - 12), &ho)) << "no count";
}

// Every code a peer may send comes through (kLoop, the newest, was once refused as malformed); one past the last
// is refused rather than narrowed.
TEST(Protocol, EveryStatusCodeCrossesTheWire) {
  namespace dp = daemon_proto;
  unsigned char b[dp::kReplyHeaderSize];
  dp::ReplyHeader h, g;
  for (uint32_t v = 0; v <= static_cast<uint32_t>(kLastCode); ++v) {
    h.code = static_cast<Code>(v);
    dp::EncodeReplyHeader(h, b);
    ASSERT_TRUE(dp::DecodeReplyHeader(b, &g)) << v;
    EXPECT_EQ(g.code, h.code);
  }
  EXPECT_EQ(static_cast<uint32_t>(Code::kLoop), static_cast<uint32_t>(kLastCode));
  le::Store32(b + 16, static_cast<uint32_t>(kLastCode) + 1);
  EXPECT_FALSE(dp::DecodeReplyHeader(b, &g));
}

}  // namespace
}  // namespace fanstore
