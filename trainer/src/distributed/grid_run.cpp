// The training loop's view of a model on a grid: the split path (DistributedModel) or the plain one.
#include "trainer/distributed_run.hpp"

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "trainer/distributed_losses.hpp"

namespace fanstore::trainer {

GridRun::GridRun(Model& model, Communicator& world, const ResolvedGrid& resolved, const GridOptions& options)
    : model_(model),
      world_(world),
      shape_(resolved.shape),
      shard_state_(options.shard_state),
      shard_weights_(options.shard_weights) {
  check_grid_ranks(shape_, world.size());
  model.set_input_gradient(false);                      // training reads no gradient of the model input
  if (!resolved.spatial() && !options.sync_bn) return;  // plain data parallelism: every rank its own group
  grid_ = std::make_unique<ProcessGrid>(world, shape_);
  split_ = std::make_unique<DistributedModel>(
      model, *grid_, distributed_options(options, model.input_shape().spatial_rank(), resolved.one_kernel_layers));
}

GridRun::~GridRun() = default;

int GridRun::sample_group() const { return grid_ ? grid_->sample_group() : world_.rank() / shape_.spatial_ranks(); }

bool GridRun::counts_for_group() const { return !grid_ || grid_->spatial_index() == 0; }

std::optional<SlabRead> GridRun::slab_read() const {
  if (!split_) return std::nullopt;
  SlabRead r;
  r.input = split_->input_box();
  r.labels = split_->output_split() ? split_->output_slab() : SpatialBox{};
  return r;
}

Shape GridRun::local_input_shape() const { return split_ ? split_->local_input_shape() : model_.input_shape(); }

Shape GridRun::local_output_shape() const { return split_ ? split_->local_output_shape() : model_.output_shape(); }

Tensor GridRun::forward(const Tensor& input, Mode mode) {
  if (!split_) return model_.forward(input, mode);
  return split_->forward(input, mode);
}

// The ranks of a sample group load parts of the same samples; a sample bad in one rank's part only (a truncated
// file, a NaN in one slab) is replaced there alone under --skip-bad-samples. Training on that would mix two
// samples: stop instead, on every rank of the group alike.
void GridRun::check_group_samples(const data::Batch& batch) {
  if (!check_samples_) return;
  // Each index and its negation, maximised over the group: equal everywhere exactly when every pair comes back as
  // it went (indices are far below 2^53, exact in a double).
  const std::size_t n = batch.sample_indices.size();
  std::vector<double> extremes(2 * n);
  for (std::size_t k = 0; k < n; ++k) {
    extremes[k] = static_cast<double>(batch.sample_indices[k]);
    extremes[n + k] = -extremes[k];
  }
  grid_->spatial().max(extremes.data(), extremes.size());
  bool same = true;
  for (std::size_t k = 0; k < n; ++k) same = same && extremes[k] == -extremes[n + k];
  if (same) return;
  // The group's first rank says it, and its error ends the job (MPI_Abort: the other groups know nothing of it). The
  // others give it time to, so that the line is said once; they say it too only should the job still run.
  if (grid_->spatial().rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(30));
  throw std::runtime_error(
      "the ranks of sample group " + std::to_string(grid_->sample_group()) + " hold different samples of batch " +
      std::to_string(batch.number) +
      ": a sample is bad in part of its volume only, and --skip-bad-samples replaced it on some ranks; repair or "
      "remove the file the warnings name");
}

LossResult GridRun::loss(TaskKind task, const Tensor& output, const data::Batch& batch) {
  if (!split_) return task_loss(model_.backend(), task, output, batch);
  check_group_samples(batch);
  return grid_task_loss(task, *split_, output, batch);
}

void GridRun::backward(const Tensor& dy) {
  if (!split_) model_.backward(dy);
  else split_->backward(dy);
}

void GridRun::set_gradient_ready_hook(Model::GradientReadyHook hook) {
  if (!split_) model_.set_gradient_ready_hook(std::move(hook));
  else split_->set_gradient_ready_hook(std::move(hook));
}

void GridRun::accumulate_metric(TaskKind task, const Tensor& output, const data::Batch& batch, std::size_t valid,
                                MetricSums& sums) {
  if (!split_) trainer::accumulate_metric(task, model_.backend().to_host(output), batch, valid, sums);
  else {
    check_group_samples(batch);
    grid_accumulate_metric(task, *split_, output, batch, valid, sums);
  }
}

void GridRun::shard(Optimizer& optimizer) {
  if (!split_ || !shard_state_) return;
  optimizer.shard_over(grid_->spatial());
  if (shard_weights_ && optimizer.sharded()) model_.parameters().keep_value_part(grid_->spatial(), optimizer.parts());
}

std::unique_ptr<GradientReduction> GridRun::make_gradient_reduction(const Optimizer& optimizer,
                                                                    std::size_t bucket_bytes) {
  return trainer::make_gradient_reduction(world_, grid_.get(), model_.parameters(), optimizer, bucket_bytes,
                                          static_cast<std::size_t>(shape_.samples));
}

}  // namespace fanstore::trainer
