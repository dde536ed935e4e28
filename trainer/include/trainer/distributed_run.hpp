// What the training loop needs from a model that may run on a sample x spatial grid: which samples
// this rank's group trains on, what it loads of each sample, and forward / loss / backward / metric
// on a batch, split over the grid when it has a spatial split (or --sync-bn), plain otherwise.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "trainer/distributed_commands.hpp"
#include "trainer/distributed_model.hpp"
#include "trainer/metrics.hpp"
#include "trainer/optim.hpp"
#include "trainer/train_data.hpp"

namespace fanstore::trainer {

class GridRun {
 public:
  // `model` is built with batch = resolved.batch_per_group. Collective over `world` (builds the grid's
  // communicators); throws GridError when the grid cannot run the model.
  GridRun(Model& model, Communicator& world, const ResolvedGrid& resolved, const GridOptions& options);
  ~GridRun();

  const GridShape& grid() const { return shape_; }
  // Data parallelism is over the sample groups: shard by these, not by rank.
  int sample_group() const;
  int sample_groups() const { return shape_.samples; }
  // This rank computes what every spatial rank of its group computes for replicated outputs; only one
  // of them counts it (metrics, the predict-the-mean baseline).
  bool counts_for_group() const;

  // What this rank loads of every sample when the model runs split: its slab plus the first layer's
  // halo, and the labels of its output slab. Empty: whole samples.
  std::optional<SlabRead> slab_read() const;
  // This rank's input (its box of each sample) and output (its output slab, or the whole output) shapes.
  Shape local_input_shape() const;
  Shape local_output_shape() const;

  // A batch's input (this rank's box of it, on the device: upload_input, InputFeed) through the model;
  // the output plain on the device.
  Tensor forward(const Tensor& input, Mode mode);
  LossResult loss(TaskKind task, const Tensor& output, const data::Batch& batch);
  // Writes this rank's share of the parameter gradients (see DistributedModel).
  void backward(const Tensor& dy);
  void set_gradient_ready_hook(Model::GradientReadyHook hook);
  void accumulate_metric(TaskKind task, const Tensor& output, const data::Batch& batch, std::size_t valid,
                         MetricSums& sums);
  // On a spatial grid with --shard-state (the default): the optimizer's state sharded over the
  // spatial group (Optimizer::shard_over; make_gradient_reduction then shards the gradients too), and
  // with --shard-weights the weights (ParameterTable::keep_value_part). Before the first step and before
  // a resume.
  void shard(Optimizer& optimizer);
  // The gradient averaging of a step (make_gradient_reduction): ZeRO stage 2 when shard() sharded the
  // optimizer, else the bucketed allreduce over every rank divided by the sample groups (each sample
  // group's ranks hold parts of its gradient).
  std::unique_ptr<GradientReduction> make_gradient_reduction(const Optimizer& optimizer, std::size_t bucket_bytes);
  // With --skip-bad-samples a rank may replace a sample that its part alone finds bad: then each split loss and
  // metric first checks that the group's ranks hold the same samples (one small allreduce; off by default).
  void check_group_samples_on(bool on) { check_samples_ = on; }

 private:
  void check_group_samples(const data::Batch& batch);

  Model& model_;
  Communicator& world_;
  GridShape shape_;
  std::unique_ptr<ProcessGrid> grid_;
  std::unique_ptr<DistributedModel> split_;
  bool shard_state_ = false, shard_weights_ = false, check_samples_ = false;
};

}  // namespace fanstore::trainer
