// Losses and metrics over a split output: slab terms weighted and summed over the spatial group.
#include <vector>

#include "trainer/distributed_losses.hpp"

namespace fanstore::trainer {
namespace {

// The slab's share of the output voxels (1 for a replicated output).
double slab_share(DistributedModel& model) {
  if (!model.output_split()) return 1.0;
  return static_cast<double>(model.output_slab().volume()) /
         static_cast<double>(model.plan().output().partition.whole().volume());
}

// Whether this rank adds its slab's terms to the sums: one replica of each part of the output does.
bool counts(DistributedModel& model) { return model.plan().output().partition.first_replica(model.grid().coords()); }

}  // namespace

LossResult grid_task_loss(TaskKind task, DistributedModel& model, const Tensor& output, const data::Batch& batch) {
  if (!model.output_split()) return task_loss(model.model().backend(), task, output, batch);
  if (task != TaskKind::Segmentation) throw std::logic_error("a split output is only supported for segmentation");
  Backend& b = model.model().backend();
  Communicator& spatial = model.grid().spatial();
  const double share = slab_share(model);
  // Cross-entropy: the mean over this slab's voxels, weighted by its share, summed = the global mean.
  LossResult ce = b.softmax_cross_entropy(output, batch.target_labels, 0.f);
  double ce_loss = counts(model) ? ce.loss * share : 0.0;
  spatial.sum(&ce_loss, 1);
  // Dice: per (sample, class) sums over the whole volume, then the loss and this slab's gradient.
  Tensor sums = b.dice_sums(output, batch.target_labels);
  if (!counts(model)) sums = b.zeros_like(sums);
  sum_tensor(sums, spatial);  // on the device
  LossResult dice = b.dice_loss_from_sums(output, batch.target_labels, sums, false);
  // MLPerf's DiceCELoss = (dice + CE) / 2.
  LossResult r;
  r.loss = (dice.loss + ce_loss) / 2;
  r.gradient = dice.gradient;
  b.axpby(static_cast<float>(share / 2), ce.gradient, 0.5f, r.gradient);
  return r;
}

void grid_accumulate_metric(TaskKind task, DistributedModel& model, const Tensor& output, const data::Batch& batch,
                            std::size_t valid, MetricSums& sums) {
  const bool root = model.grid().spatial_index() == 0;
  if (!model.output_split()) {
    if (root) accumulate_metric(task, model.model().backend().to_host(output), batch, valid, sums);
    return;
  }
  // Dice of the argmax prediction: per (sample, class) counts summed over the slabs, then the ratio.
  std::vector<double> dice = dice_counts(model.model().backend().to_host(output), batch, valid);
  if (!counts(model)) dice.assign(dice.size(), 0.0);
  model.grid().spatial().sum(dice.data(), dice.size());
  if (root) accumulate_dice(dice, output.shape()[1], valid, sums);
}

}  // namespace fanstore::trainer
