// Validation metrics on hand-made outputs: top-1 accuracy, MAE, mean Dice (with padding left out).
#include <gtest/gtest.h>

#include "trainer/metrics.hpp"

namespace fanstore::trainer {
namespace {

TEST(Metrics, TopOneAccuracyCountsOnlyValidSamples) {
  Tensor logits = Tensor::zeros(Shape{3, 2});  // (N, K)
  const float values[] = {2, 1, 0, 3, 5, 4};   // argmax 0, 1, 0
  std::copy(values, values + 6, logits.data());
  data::Batch b;
  b.target_labels = {0, 0, 1};
  MetricSums sums;
  accumulate_metric(TaskKind::Classification, logits, b, 2, sums);  // the third sample is padding
  EXPECT_DOUBLE_EQ(sums.count, 2);
  EXPECT_DOUBLE_EQ(sums.value(), 0.5);
}

TEST(Metrics, MeanAbsoluteErrorOverTargets) {
  Tensor y = Tensor::zeros(Shape{2, 2});
  const float values[] = {0.5f, -0.5f, 1.f, 1.f};
  std::copy(values, values + 4, y.data());
  data::Batch b;
  b.target_values = {0.f, 0.f, 0.f, 0.f};
  MetricSums sums;
  accumulate_metric(TaskKind::Regression, y, b, 2, sums);
  EXPECT_DOUBLE_EQ(sums.value(), 0.75);
  auto backend = make_cpu_backend({1});
  LossResult mse = task_loss(*backend, TaskKind::Regression, y, b);
  EXPECT_NEAR(mse.loss, (0.25 + 0.25 + 1 + 1) / 4, 1e-12);
}

TEST(Metrics, DiceOfArgmaxPerForegroundClass) {
  // One sample, 3 classes, 4 voxels: prediction (argmax) 0 1 1 2, labels 0 1 2 2.
  Tensor logits = Tensor::zeros(Shape{1, 3, 1, 1, 4});
  const int predicted[] = {0, 1, 1, 2};
  for (int v = 0; v < 4; ++v) logits[predicted[v] * 4 + v] = 1.f;
  data::Batch b;
  b.target_labels = {0, 1, 2, 2};
  MetricSums sums;
  accumulate_metric(TaskKind::Segmentation, logits, b, 1, sums);
  // class 1: |P|=2, |T|=1, |P and T|=1 -> 2/3; class 2: |P|=1, |T|=2, 1 -> 2/3.
  EXPECT_DOUBLE_EQ(sums.count, 2);
  EXPECT_NEAR(sums.value(), 2.0 / 3.0, 1e-12);
  // A label outside the classes is an error, never a count written outside the sums.
  for (std::int32_t bad : {3, -1}) {
    b.target_labels = {0, 1, bad, 2};
    EXPECT_THROW(accumulate_metric(TaskKind::Segmentation, logits, b, 1, sums), std::invalid_argument);
  }
}

TEST(Metrics, ModelNamesMapToTasks) {
  EXPECT_EQ(metric_name(task_for_model("resnet50")), "top1_accuracy");
  EXPECT_EQ(metric_name(task_for_model("cosmoflow")), "mae");
  EXPECT_EQ(metric_name(task_for_model("unet3d")), "mean_dice");
  EXPECT_THROW(task_for_model("vgg"), std::invalid_argument);
}

}  // namespace
}  // namespace fanstore::trainer
