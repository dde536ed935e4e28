// One rank's part of a model on a sample x spatial grid: forward and backward over the rank's slabs,
// with halo exchanges, reverse halos and spatial reductions, giving exactly the serial computation
// (up to float summation order) when the slabs are gathered.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trainer/distributed_grid.hpp"
#include "trainer/distributed_plan.hpp"
#include "trainer/model.hpp"

namespace fanstore::trainer {

struct DistributedOptions {
  // Batch-norm statistics over every rank (all sample groups), not only over the spatial group:
  // with it, S sample groups of batch B compute what one rank computes with batch S*B.
  bool sync_bn = false;
  // Compute each windowed layer's interior while its halo travels, then the boundary pieces.
  bool overlap = true;
  // Layers that run as one kernel after their halo arrived all the same: where --grid auto's model found
  // that their pieces cost more than the overlap saves.
  std::set<std::string> one_kernel_layers;
  // Parts per layer where the default plan's (the finest that works) is not wanted.
  LayerSplits layer_splits;
};

// The DistributedOptions that fanstore-train's grid options ask for (throws GridError for a bad
// --layer-split).
DistributedOptions distributed_options(const GridOptions& options, int spatial_rank,
                                       const std::vector<std::string>& one_kernel_layers = {});

class SplitOp;         // one node's split forward/backward (trainer/src/distributed/split_ops.hpp)
class Redistribution;  // an input moved between two splits (same header)
struct SplitContext;

// Wraps a built model (global shapes; its layers and parameter table are used as they are). The
// parameters must be the same on every rank (same seed, or a broadcast checkpoint).
//
// Gradients: backward() writes this rank's share of every parameter gradient. Summed over the
// spatial group they are the sample group's gradient (layers whose work is replicated on every
// spatial rank contribute on spatial rank 0 only; with sync_bn, batch-norm scales and shifts on world
// rank 0 only), so their sum over all ranks, divided by the number of sample groups, is the
// data-parallel average (make_gradient_reduction: an allreduce, or each part summed to its owner).
class DistributedModel {
 public:
  // Throws GridError when the grid cannot run the model (see SpatialPlan).
  DistributedModel(Model& model, ProcessGrid& grid, DistributedOptions options = {});
  ~DistributedModel();
  DistributedModel(const DistributedModel&) = delete;
  DistributedModel& operator=(const DistributedModel&) = delete;

  Model& model() { return model_; }
  ProcessGrid& grid() { return grid_; }
  const SpatialPlan& plan() const { return plan_; }

  // What this rank loads of each input sample: its slab plus the halo the first layer reads (so the
  // first layer needs no exchange); and its own slab (the gradient backward() returns).
  const SpatialBox& input_box() const { return input_box_; }
  const SpatialBox& input_slab() const { return input_slab_; }
  // Local input (N, C, *input_box()) and output shapes; a split output (segmentation) covers
  // output_slab(), a replicated one (dense head) is the model's whole output.
  const Shape& local_input_shape() const { return local_input_shape_; }
  Shape local_output_shape() const;
  bool output_split() const { return plan_.output().placement == Placement::kSplit; }
  SpatialBox output_slab() const;

  // x: plain (N, C, *input_box()). Returns the local output, plain.
  Tensor forward(const Tensor& x, Mode mode);
  // dy: plain, local_output_shape() (for a replicated output every spatial rank passes the same dy).
  // Returns the gradient of this rank's input slab (N, C, *input_slab()), plain.
  Tensor backward(const Tensor& dy);
  // As Model::set_gradient_ready_hook: called after each layer's backward, in backward order.
  void set_gradient_ready_hook(Model::GradientReadyHook hook) { gradient_ready_ = std::move(hook); }
  // Kernels the layer named `layer` runs per forward on this rank: its interior and boundary pieces when
  // it overlaps its halo, else 1 (throws std::out_of_range for a name the model lacks).
  std::size_t kernels_of(const std::string& layer) const;

 private:
  // run() with node id's layer's parameters gathered (ParameterTable::gather_values) when it reads them.
  template <typename F>
  auto with_values(NodeId id, bool reads_weights, F&& run);

  Model& model_;
  ProcessGrid& grid_;
  DistributedOptions options_;
  SpatialPlan plan_;
  SpatialBox input_box_, input_slab_;
  Shape local_input_shape_;
  std::unique_ptr<SplitContext> context_;
  std::vector<std::unique_ptr<SplitOp>> ops_;                                  // per node (null for the input)
  std::vector<std::vector<std::unique_ptr<Redistribution>>> redistributions_;  // per node and input (or null)
  std::vector<Tensor> values_, gradients_;
  Model::GradientReadyHook gradient_ready_;
};

}  // namespace fanstore::trainer
