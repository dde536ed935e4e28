// The split forward/backward of one graph node on one rank of a spatial group, per layer kind:
// windowed layers (halo exchange, interior/boundary pieces, reverse halo), normalisation with
// statistics reduced over the group, global pooling and the dense head's partial products, dropout
// on the global mask, and layers that run unchanged on a slab.
#pragma once

#include <memory>
#include <vector>

#include "trainer/distributed_model.hpp"

namespace fanstore::trainer {

// What every split op needs.
struct SplitContext {
  Backend& backend;
  ParameterTable& table;
  ProcessGrid& grid;
  const SpatialPlan& plan;
  DistributedOptions options;

  bool spatial_root() { return grid.spatial_index() == 0; }
  // Whether this rank adds its part of a tensor split as `p` to a sum over the spatial group: one
  // replica of each part does, so a part held by several ranks counts once.
  bool counts(const Partition& p) { return p.first_replica(grid.coords()); }
  // A tensor of this backend (F32 or F64, plain) summed in place over the spatial group, on its
  // device (sum_tensor); statistics also over the sample groups when sync_bn (world = spatial x
  // samples: spatial first, then samples).
  void spatial_sum(Tensor& t);
  void statistics_sum(Tensor& t);
};

class SplitOp {
 public:
  virtual ~SplitOp() = default;
  // inputs: this rank's slabs of the node's inputs (a windowed consumer of the model input gets the
  // loaded box, slab plus halo). Returns this rank's part of the output.
  virtual Tensor forward(const std::vector<Tensor>& inputs, Mode mode) = 0;
  // One gradient per input, over that input's slab. Takes dy by value: an op may drop it early.
  virtual std::vector<Tensor> backward(Tensor dy) = 0;
  // Kernels one forward runs: an overlapped windowed layer its interior and boundary pieces, any other one.
  virtual std::size_t kernels() const { return 1; }
  // Whether backward reads the layer's weights (with sharded weights, gathered only then). The same on
  // every rank: it depends on the op and the graph alone.
  virtual bool backward_reads_weights() const { return true; }
};

// Moves one input of a layer from its producer's split to the split the layer reads (forward) and its
// gradient back (backward: a replicated tensor's gradient is whole and the same on every replica, so
// the reverse plan only copies). Tensors are (N, C, *part) of the respective split.
class Redistribution {
 public:
  Redistribution(Backend& backend, Communicator& spatial, const Partition& from, const Partition& to,
                 const std::vector<int>& coords, int tag);
  Tensor forward(const Tensor& x);
  Tensor backward(const Tensor& dy);

 private:
  Backend& backend_;
  HaloExchange forward_, backward_;
};

// The op for node `id` of `model`; `input_box` is what the model input tensor covers on this rank.
std::unique_ptr<SplitOp> make_split_op(SplitContext& ctx, Model& model, NodeId id, const SpatialBox& input_box);

// (n, c, *box extents).
Shape box_shape(std::int64_t n, std::int64_t c, const SpatialBox& box);
// `region` of src (N, C, *src_box) as a new plain tensor (N, C, *region), or src itself when the
// boxes are equal.
Tensor crop(Backend& backend, const Tensor& src, const SpatialBox& src_box, const SpatialBox& region);

std::unique_ptr<SplitOp> make_split_windowed(SplitContext& ctx, Layer& layer, NodeId id, const Partition& in,
                                             const Partition& out, const Window& window, const SpatialBox& given);
std::unique_ptr<SplitOp> make_split_batch_norm(SplitContext& ctx, Layer& layer, const Partition& partition);
std::unique_ptr<SplitOp> make_split_instance_norm(SplitContext& ctx, Layer& layer, const Partition& partition);
std::unique_ptr<SplitOp> make_split_global_pooling(SplitContext& ctx, Layer& layer, const Partition& partition);
std::unique_ptr<SplitOp> make_split_flat_linear(SplitContext& ctx, Layer& layer, const Partition& partition,
                                                std::int64_t channels);
// Runs the layer itself on this rank's tensors (element-wise layers on slabs, the replicated head).
std::unique_ptr<SplitOp> make_pass_through(Layer& layer);

}  // namespace fanstore::trainer
