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

TEST(Placement, ReadOrderSkipsSelfAndRotatesByEntry) {
  EXPECT_EQ(ReadOrder(0, 3, 99, 4, 2, 1), (std::vector<int>{3, 0}));
  EXPECT_EQ(ReadOrder(1, 3, 99, 4, 2, 1), (std::vector<int>{0, 3}));
  EXPECT_EQ(ReadOrder(1, 3, 99, 4, 2, 0), (std::vector<int>{3}));
  EXPECT_TRUE(ReadOrder(5, 1, 99, 1, 1, 0).empty());  // only this rank holds it
}

TEST(Protocol, RequestRoundTrip) {
  unsigned char b[daemon_proto::kRequestSize];
  daemon_proto::EncodeRequest({daemon_proto::MsgType::kFetch, 0x1122334455667788ull, 42}, b);
  daemon_proto::Request r;
  ASSERT_TRUE(daemon_proto::DecodeRequest(b, &r));
  EXPECT_EQ(r.req_id, 0x1122334455667788ull);
  EXPECT_EQ(r.entry, 42u);
  b[0] ^= 1;
  EXPECT_FALSE(daemon_proto::DecodeRequest(b, &r));
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
  daemon_proto::HelloInfo hi{2, 4, 5000, "/nvme/x", "/nvme/x"};
  daemon_proto::HelloInfo ho;
  ASSERT_TRUE(daemon_proto::DecodeHello(daemon_proto::EncodeHello(hi), &ho));
  EXPECT_EQ(ho.rank, 2u);
  EXPECT_EQ(ho.index_dir, "/nvme/x");
  EXPECT_FALSE(daemon_proto::DecodeHello("short", &ho));
}

}  // namespace
}  // namespace fanstore
