// The loss guard: a diverging update that alternates with rollbacks stops the run; a one-off spike does not.
#include <gtest/gtest.h>

#include <cmath>

#include "small_models.hpp"
#include "trainer/loss_guard.hpp"

namespace fanstore::trainer {
namespace {

TEST(LossGuard, ADivergingUpdateAlternatingWithRollbacksCountsAsRejectionsInARow) {
  auto model = small_cosmoflow(1);
  auto optimizer = make_optimizer(model->parameters(), OptimizerOptions{});
  LossGuard guard(0);
  ASSERT_TRUE(guard.accept(1.0, *model, *optimizer));  // a fresh state: good
  // Each update diverges (NaN loss), is rolled back, and the restored state's loss is good again.
  for (int round = 1; round <= 5; ++round) {
    EXPECT_FALSE(guard.accept(NAN, *model, *optimizer));
    guard.roll_back(*model, *optimizer);
    EXPECT_EQ(guard.consecutive_rejections(), static_cast<std::uint64_t>(round));
    ASSERT_TRUE(guard.accept(1.0, *model, *optimizer));  // the restored state: no evidence of progress
    EXPECT_EQ(guard.consecutive_rejections(), static_cast<std::uint64_t>(round));
  }
  EXPECT_EQ(guard.rollbacks(), 5u);
}

TEST(LossGuard, AGoodUpdateAfterARollbackStartsTheCountAfresh) {
  auto model = small_cosmoflow(1);
  auto optimizer = make_optimizer(model->parameters(), OptimizerOptions{});
  LossGuard guard(0);
  ASSERT_TRUE(guard.accept(1.0, *model, *optimizer));
  EXPECT_FALSE(guard.accept(INFINITY, *model, *optimizer));  // one bad batch
  guard.roll_back(*model, *optimizer);
  ASSERT_TRUE(guard.accept(1.0, *model, *optimizer));  // the restored state
  EXPECT_EQ(guard.consecutive_rejections(), 1u);
  ASSERT_TRUE(guard.accept(0.9, *model, *optimizer));  // the next update's state is good: progress
  EXPECT_EQ(guard.consecutive_rejections(), 0u);
}

}  // namespace
}  // namespace fanstore::trainer
