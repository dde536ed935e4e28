// The project's one generator (fanstore/random.hpp): Philox4x32-10 known answers and the stream on top.
#include <array>
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "fanstore/random.hpp"

namespace fanstore {
namespace {

// Random123's published known-answer vectors for Philox4x32-10 (its tests/kat_vectors).
TEST(Random, PhiloxKnownAnswers) {
  auto check = [](std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> k, std::array<std::uint32_t, 4> want) {
    const PhiloxBlock b = philox4x32_10(c[0], c[1], c[2], c[3], k[0], k[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(b.word[i], want[static_cast<std::size_t>(i)]) << "word " << i;
  };
  check({0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  check({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  check({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST(Random, BlockIsAPureFunctionOfKeyDrawAndIndex) {
  const PhiloxBlock a = random_block(42, 7, 123456789012ull), b = random_block(42, 7, 123456789012ull);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.word[i], b.word[i]);
  const PhiloxBlock c = random_block(42, 8, 123456789012ull), d = random_block(43, 7, 123456789012ull);
  EXPECT_NE(a.word[0], c.word[0]);
  EXPECT_NE(a.word[0], d.word[0]);
}

TEST(Random, StreamRepeatsAndStaysInRange) {
  RandomStream a(5), b(5), c(6);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const auto x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_NE(RandomStream(5).next_u64(), c.next_u64());
  RandomStream r(9);
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const float f = r.uniform_float(-2.f, 3.f);
    ASSERT_GE(f, -2.f);
    ASSERT_LT(f, 3.f);
    ASSERT_LT(r.below(7), 7u);
    const double z = r.normal();
    sum += z;
    sq += z * z;
  }
  // Mean 0 and variance 1 within ~5 standard errors.
  EXPECT_NEAR(sum / n, 0.0, 5.0 / std::sqrt(n));
  EXPECT_NEAR(sq / n, 1.0, 5.0 * std::sqrt(2.0 / n));
}

TEST(Random, ProbabilityThresholdsAreExactAtTheEnds) {
  EXPECT_EQ(probability_threshold(0.0), 0u);
  EXPECT_EQ(probability_threshold(1.0), 0x100000000ull);
  EXPECT_EQ(probability_threshold(0.25), 0x40000000ull);
  RandomStream r(3);
  int hits = 0;
  for (int i = 0; i < 40000; ++i) hits += r.chance(0.25);
  EXPECT_NEAR(hits / 40000.0, 0.25, 0.01);
}

TEST(Random, MixSeedSeparatesParts) {
  EXPECT_NE(mix_seed({1, 2}), mix_seed({2, 1}));
  EXPECT_NE(mix_seed({1, 2}), mix_seed({1, 2, 0}));
  EXPECT_EQ(mix_seed({1, 2, 3}), mix_seed({1, 2, 3}));
}

}  // namespace
}  // namespace fanstore
