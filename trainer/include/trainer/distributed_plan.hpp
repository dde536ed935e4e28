// How a model runs on a sample x spatial grid: per graph node, whether its output is split over the
// spatial group or replicated on every rank of it, how finely it is split (each layer as finely as its
// extent, window and halo allow, or as --layer-split says), the split its inputs are read in and which
// window its layer reads through; checked once, so a plan that cannot work is one line before any work.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainer/distributed_grid.hpp"
#include "trainer/distributed_halo.hpp"
#include "trainer/model.hpp"

namespace fanstore::trainer {

enum class Placement {
  kSplit,       // (N, C, *S): each spatial rank holds its slab of S
  kSplitFlat,   // Flatten of a split tensor: each rank holds its slab's features (feeds a Linear)
  kReplicated,  // every spatial rank holds the whole tensor (after global pooling or the dense head)
};

struct NodePlacement {
  Placement placement = Placement::kSplit;
  Partition partition;           // kSplit: of this node's spatial axes; kSplitFlat: of the flattened input's
  std::optional<Window> window;  // windowed layers (convolution, transposed convolution, pooling)
  // The split each input is read in. A split layer reads its inputs split as its output (over the
  // input's extents); an input split otherwise is redistributed to it first, forward and backward.
  std::vector<Partition> inputs;
};

// --layer-split: layer name -> parts per spatial axis (each dividing the grid's ranks along it).
using LayerSplits = std::map<std::string, std::vector<int>>;

// Parses --layer-split "NAME=D,H,W[;NAME=...]" (H,W for 2D models). Throws GridError.
LayerSplits parse_layer_splits(const std::string& text, int spatial_rank);

class SpatialPlan {
 public:
  // Throws GridError when the grid's spatial rank differs from the model's, when a layer cannot run
  // split (e.g. a Linear on a split tensor without Flatten), or when a --layer-split entry names no
  // split layer or cannot work (fewer positions than parts, a halo wider than a slab).
  SpatialPlan(const Model& model, GridShape grid, const LayerSplits& forced = {});

  const GridShape& grid() const { return grid_; }
  const NodePlacement& node(NodeId id) const { return nodes_.at(id); }
  std::size_t node_count() const { return nodes_.size(); }

  // The input's split, this rank's slab of it, and the box it loads: its slab plus the halo that the
  // input's consumers read (so the first layer needs no exchange).
  const Partition& input_partition() const { return nodes_.front().partition; }
  SpatialBox input_read_box(const std::vector<int>& coords) const;

  // The model output's placement (split for segmentation, replicated after a dense head).
  const NodePlacement& output() const { return nodes_.at(output_); }
  // Whether input k of node `id` is redistributed before the layer reads it.
  bool redistributes(NodeId id, std::size_t k) const;
  // Whether node `id` reads the model input as loaded (the slab with its consumers' halo): a windowed
  // layer then takes its halo from the file, not from a peer.
  bool reads_loaded_input(NodeId id) const { return input_of(id, 0) == 0 && !redistributes(id, 0); }

  // One line per node: its layer, output shape, how it is split and what is redistributed into it.
  std::string describe(const Model& model) const;

 private:
  GridShape grid_;
  std::vector<NodePlacement> nodes_;
  std::vector<std::vector<NodeId>> consumers_, producers_;
  NodeId input_of(NodeId id, std::size_t k) const { return producers_.at(id).at(k); }
  NodeId output_ = 0;
};

}  // namespace fanstore::trainer
