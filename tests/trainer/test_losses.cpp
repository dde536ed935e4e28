// Losses: values against hand computations and finite-difference checks of their gradients.
#include <cmath>

#include <gtest/gtest.h>

#include "layer_harness.hpp"
#include "trainer/losses.hpp"

namespace fanstore::trainer::testing {
namespace {

// Central differences of the loss w.r.t. every prediction element (double loss, float inputs);
// |analytic - numeric| <= 1e-4 + 1e-2 |numeric|.
template <class F>
void check_loss_gradient(Tensor prediction, F loss) {
  LossResult r = loss(prediction);
  const double eps = 1e-3;
  for (std::int64_t i = 0; i < prediction.numel(); ++i) {
    const float saved = prediction[i];
    prediction[i] = static_cast<float>(saved + eps);
    const double plus = loss(prediction).loss;
    prediction[i] = static_cast<float>(saved - eps);
    const double minus = loss(prediction).loss;
    prediction[i] = saved;
    const double step = static_cast<double>(static_cast<float>(saved + eps)) - static_cast<float>(saved - eps);
    const double numeric = (plus - minus) / step;
    EXPECT_NEAR(r.gradient[i], numeric, 1e-4 + 1e-2 * std::fabs(numeric)) << "element " << i;
  }
}

TEST(Losses, CrossEntropyMatchesHandComputation) {
  Tensor logits = Tensor::zeros({1, 3});
  logits[0] = 1.f, logits[1] = 2.f, logits[2] = 3.f;
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(softmax_cross_entropy(logits, {2}).loss, lse - 3.0, 1e-9);
  // Label smoothing 0.1: 0.9 * nll(target) + 0.1 * mean over classes of nll(k).
  const double smooth = 0.9 * (lse - 3.0) + 0.1 * ((lse - 1) + (lse - 2) + (lse - 3)) / 3;
  EXPECT_NEAR(softmax_cross_entropy(logits, {2}, 0.1f).loss, smooth, 1e-7);  // 0.1f is not 0.1
}

TEST(Losses, CrossEntropyGradient) {
  Rng rng(1);
  check_loss_gradient(random_tensor({4, 5}, rng, -2, 2), [](const Tensor& p) {
    return softmax_cross_entropy(p, {0, 4, 2, 2}, 0.1f);
  });
}

TEST(Losses, CrossEntropySpatialGradient) {
  Rng rng(2);
  std::vector<std::int32_t> labels{0, 1, 2, 1, 0, 2, 2, 1, 0, 0, 1, 2, 2, 2, 1, 0};
  check_loss_gradient(random_tensor({2, 3, 2, 2, 2}, rng, -2, 2),
                      [&](const Tensor& p) { return softmax_cross_entropy(p, labels); });
}

TEST(Losses, MeanSquaredError) {
  Rng rng(3);
  Tensor target = random_tensor({3, 4}, rng);
  Tensor pred = random_tensor({3, 4}, rng);
  double expected = 0;
  for (std::int64_t i = 0; i < 12; ++i) expected += std::pow(pred[i] - target[i], 2) / 12;
  EXPECT_NEAR(mean_squared_error(pred, target).loss, expected, 1e-7);
  check_loss_gradient(pred, [&](const Tensor& p) { return mean_squared_error(p, target); });
}

TEST(Losses, DiceIsZeroForPerfectConfidentPrediction) {
  Tensor logits = Tensor::zeros({1, 2, 1, 1, 4});
  std::vector<std::int32_t> labels{0, 1, 1, 0};
  for (int i = 0; i < 4; ++i) {
    logits[i] = labels[static_cast<std::size_t>(i)] == 0 ? 30.f : -30.f;
    logits[4 + i] = -logits[i];
  }
  EXPECT_NEAR(dice_loss(logits, labels).loss, 0.0, 1e-6);
}

TEST(Losses, DiceGradient) {
  Rng rng(4);
  std::vector<std::int32_t> labels{0, 1, 2, 1, 0, 2, 2, 1, 0, 0, 1, 2, 2, 2, 1, 0};
  check_loss_gradient(random_tensor({2, 3, 2, 2, 2}, rng, -2, 2),
                      [&](const Tensor& p) { return dice_loss(p, labels); });
}

TEST(Losses, DiceCrossEntropyGradient) {
  Rng rng(5);
  std::vector<std::int32_t> labels{0, 1, 2, 1, 0, 2, 2, 1};
  check_loss_gradient(random_tensor({1, 3, 2, 2, 2}, rng, -2, 2),
                      [&](const Tensor& p) { return dice_cross_entropy(p, labels); });
}

}  // namespace
}  // namespace fanstore::trainer::testing
