// What each model learns: its loss and validation metric (top-1 accuracy, MAE, mean Dice) on a batch.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/data/batch.hpp"
#include "trainer/losses.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer {

enum class TaskKind {
  Classification,  // resnet50: softmax cross-entropy, top-1 accuracy
  Regression,      // cosmoflow: MSE, mean absolute error
  Segmentation,    // unet3d: (Dice + CE) / 2, mean Dice over foreground classes
};

TaskKind task_for_model(const std::string& model);
// "top1_accuracy", "mae" or "mean_dice".
std::string metric_name(TaskKind task);

// The training loss of a model output (on the backend's device) against the batch's targets, by the
// backend's loss op; the gradient stays on the device.
LossResult task_loss(Backend& backend, TaskKind task, const Tensor& output, const data::Batch& batch);

// Sums that add up across batches and ranks: the metric is sum / count.
struct MetricSums {
  double sum = 0;
  double count = 0;
  double value() const { return count > 0 ? sum / count : 0.0; }
};

// `output` is a plain host tensor (Backend::to_host). Adds the first `valid` samples of the batch (the rest are padding
// that completes the last batch). Accuracy counts samples; MAE counts target values; Dice counts (sample, foreground
// class) pairs, dice = 2|P and T| / (|P| + |T|) of the argmax prediction, 1 when both are empty.
void accumulate_metric(TaskKind task, const Tensor& output, const data::Batch& batch, std::size_t valid,
                       MetricSums& sums);

// The Dice metric in two steps, so a spatially split output can sum its slabs' counts in between:
// per sample n < valid, [intersection, predicted, true] voxel counts per class (3 * K values, output a
// plain host tensor), then the per-(sample, foreground class) ratios added to `sums`.
std::vector<double> dice_counts(const Tensor& output, const data::Batch& batch, std::size_t valid);
void accumulate_dice(const std::vector<double>& counts, std::int64_t classes, std::size_t valid, MetricSums& sums);

}  // namespace fanstore::trainer
