// The doorbell wakes a peer's progress thread: a datagram per marked peer per flush, drained by the peer, and
// nothing sent to ranks without an address.
#include "doorbell.hpp"

#include <gtest/gtest.h>
#include <poll.h>

namespace fanstore::daemon {
namespace {

bool Readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, ms) == 1;
}

TEST(Doorbell, RingingWakesThePeerOncePerFlush) {
  Status why;
  auto a = Doorbell::Open(&why);
  auto b = Doorbell::Open(&why);
  ASSERT_TRUE(a && b) << why.ToString();
  ASSERT_TRUE(a->address().valid());
  std::vector<Doorbell::Address> all{a->address(), b->address(), Doorbell::Address{}};
  a->SetPeers(all);
  b->SetPeers(all);
  EXPECT_FALSE(Readable(b->fd(), 0));
  a->Ring(1);
  a->Ring(1);  // two messages to one peer in one step: one datagram
  EXPECT_FALSE(Readable(b->fd(), 50)) << "nothing is sent before Flush";
  a->Flush();
  ASSERT_TRUE(Readable(b->fd(), 2000));
  EXPECT_EQ(b->Drain(), 1);
  EXPECT_FALSE(Readable(b->fd(), 0)) << "Drain empties the socket";
  EXPECT_EQ(a->rung(), 1u);
  a->Ring(2);  // no address: never rung
  a->Ring(7);  // no such rank
  a->Ring(-1);
  a->Flush();
  EXPECT_EQ(a->rung(), 1u);
  b->Ring(0);
  b->Flush();
  ASSERT_TRUE(Readable(a->fd(), 2000));
  EXPECT_EQ(a->Drain(), 1);
}

}  // namespace
}  // namespace fanstore::daemon
