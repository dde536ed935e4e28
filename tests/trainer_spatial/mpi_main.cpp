// main() of the MPI test binaries: one world communicator for the tests, brief output on ranks > 0
// (failures only), and a non-zero exit on every rank when any rank failed.
#include <gtest/gtest.h>

#include <iostream>

#include "spatial_testing.hpp"

namespace fanstore::trainer::testing {
namespace {
Communicator* g_world = nullptr;
}
Communicator& world() { return *g_world; }
}  // namespace fanstore::trainer::testing

int main(int argc, char** argv) {
  auto world = fanstore::trainer::make_communicator(&argc, &argv);
  fanstore::trainer::testing::g_world = world.get();
  if (world->rank() > 0) GTEST_FLAG_SET(brief, true);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  double any[1] = {static_cast<double>(failed != 0)};
  world->max(any, 1);
  if (any[0] != 0 && world->rank() == 0) std::cerr << "some rank failed (see its output above)\n";
  return any[0] != 0 ? 1 : 0;
}
