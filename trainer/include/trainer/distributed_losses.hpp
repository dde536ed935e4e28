// The training loss and validation metric of a model running on a sample x spatial grid.
// A replicated output (the dense head of CosmoFlow and ResNet-50) is the whole output on every
// spatial rank: the serial loss applies as it is, and the metric counts once per sample group. A
// split output (U-Net's voxels) is reduced over the spatial group: cross-entropy from each slab's
// mean weighted by the slab's share of the voxels, Dice from the per-(sample, class) sums of the
// whole volume, the metric's counts summed before the ratio.
#pragma once

#include <cstddef>

#include "trainer/data/batch.hpp"
#include "trainer/distributed_model.hpp"
#include "trainer/metrics.hpp"

namespace fanstore::trainer {

// output: this rank's DistributedModel::forward result; batch: its slab's targets (labels of the
// output slab for segmentation). The gradient is this rank's part of the serial loss gradient.
LossResult grid_task_loss(TaskKind task, DistributedModel& model, const Tensor& output, const data::Batch& batch);

// Adds this sample group's metric of the first `valid` samples to `sums` on spatial rank 0 (the
// other ranks add nothing), so that summing `sums` over every rank counts each sample once.
void grid_accumulate_metric(TaskKind task, DistributedModel& model, const Tensor& output, const data::Batch& batch,
                            std::size_t valid, MetricSums& sums);

}  // namespace fanstore::trainer
