// Per-model loss and validation metric on one batch.
#include "trainer/metrics.hpp"

#include <cmath>
#include <stdexcept>

namespace fanstore::trainer {

TaskKind task_for_model(const std::string& model) {
  if (model == "resnet50") return TaskKind::Classification;
  if (model == "cosmoflow") return TaskKind::Regression;
  if (model == "unet3d") return TaskKind::Segmentation;
  throw std::invalid_argument("unknown model '" + model + "' (expected resnet50, unet3d or cosmoflow)");
}

std::string metric_name(TaskKind task) {
  switch (task) {
    case TaskKind::Classification: return "top1_accuracy";
    case TaskKind::Regression: return "mae";
    case TaskKind::Segmentation: return "mean_dice";
  }
  return "";
}

LossResult task_loss(Backend& backend, TaskKind task, const Tensor& output, const data::Batch& batch) {
  switch (task) {
    case TaskKind::Classification: return backend.softmax_cross_entropy(output, batch.target_labels, 0.f);
    case TaskKind::Segmentation: return backend.dice_cross_entropy(output, batch.target_labels, false);
    case TaskKind::Regression:  // output (N, T)
      if (batch.target_values.size() != static_cast<std::size_t>(output.numel()))
        throw std::invalid_argument("regression targets: " + std::to_string(batch.target_values.size()) +
                                    " values for an output of shape " + output.shape().to_string());
      return backend.mean_squared_error(output, batch.target_values);
  }
  throw std::logic_error("unreachable");
}

void accumulate_metric(TaskKind task, const Tensor& output, const data::Batch& batch, std::size_t valid,
                       MetricSums& sums) {
  if (output.device() != Device::Host || !output.is_plain())
    throw std::invalid_argument("accumulate_metric: the output must be a plain host tensor (Backend::to_host)");
  const auto& shape = output.shape();
  const std::int64_t k = shape[1];
  if (task == TaskKind::Classification) {
    for (std::size_t n = 0; n < valid; ++n) {  // output (N, K)
      const float* row = output.data() + static_cast<std::int64_t>(n) * k;
      std::int64_t best = 0;
      for (std::int64_t c = 1; c < k; ++c)
        if (row[c] > row[best]) best = c;
      sums.sum += best == batch.target_labels[n] ? 1.0 : 0.0;
      sums.count += 1;
    }
  } else if (task == TaskKind::Regression) {
    for (std::size_t i = 0; i < valid * static_cast<std::size_t>(k); ++i) {  // output (N, T)
      sums.sum += std::fabs(static_cast<double>(output[static_cast<std::int64_t>(i)]) - batch.target_values[i]);
      sums.count += 1;
    }
  } else {
    accumulate_dice(dice_counts(output, batch, valid), k, valid, sums);
  }
}

std::vector<double> dice_counts(const Tensor& output, const data::Batch& batch, std::size_t valid) {
  const auto& shape = output.shape();
  const std::int64_t k = shape[1], voxels = shape.spatial_size();  // output (N, K, D, H, W), labels (N, D, H, W)
  std::vector<double> counts(valid * static_cast<std::size_t>(k) * 3, 0.0);
  for (std::size_t n = 0; n < valid; ++n) {
    double* inter = counts.data() + n * static_cast<std::size_t>(k) * 3;
    double* pred = inter + k;
    double* truth = pred + k;
    const float* base = output.data() + static_cast<std::int64_t>(n) * k * voxels;
    const std::int32_t* labels = batch.target_labels.data() + static_cast<std::int64_t>(n) * voxels;
    for (std::int64_t v = 0; v < voxels; ++v) {
      std::int64_t best = 0;
      for (std::int64_t c = 1; c < k; ++c)
        if (base[c * voxels + v] > base[best * voxels + v]) best = c;
      pred[best] += 1;
      if (labels[v] < 0 || labels[v] >= k)
        throw std::invalid_argument("dice: label " + std::to_string(labels[v]) + " outside 0.." +
                                    std::to_string(k - 1));
      truth[labels[v]] += 1;
      if (best == labels[v]) inter[best] += 1;
    }
  }
  return counts;
}

void accumulate_dice(const std::vector<double>& counts, std::int64_t classes, std::size_t valid, MetricSums& sums) {
  for (std::size_t n = 0; n < valid; ++n) {
    const double* inter = counts.data() + n * static_cast<std::size_t>(classes) * 3;
    const double* pred = inter + classes;
    const double* truth = pred + classes;
    for (std::int64_t c = 1; c < classes; ++c) {  // class 0 is the background, as in the MLPerf metric
      sums.sum += pred[c] + truth[c] > 0 ? 2 * inter[c] / (pred[c] + truth[c]) : 1.0;
      sums.count += 1;
    }
  }
}

}  // namespace fanstore::trainer
