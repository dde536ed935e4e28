// How a model runs on a sample x spatial grid: per graph node, whether its output is split over the
// spatial group or replicated on every rank of it, how it is split, and which window its layer reads
// through; checked once, so a grid that cannot work is one line before any work.
#pragma once

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
};

class SpatialPlan {
 public:
  // Throws GridError when the grid's spatial rank differs from the model's, when a split tensor has
  // fewer positions along an axis than ranks splitting it, when a halo is wider than a neighbour's
  // slab, or when a layer cannot run split (e.g. a Linear on a split tensor without Flatten).
  SpatialPlan(const Model& model, GridShape grid);

  const GridShape& grid() const { return grid_; }
  const NodePlacement& node(NodeId id) const { return nodes_.at(id); }
  std::size_t node_count() const { return nodes_.size(); }

  // The input's split, this rank's slab of it, and the box it loads: its slab plus the halo that the
  // input's consumers read (so the first layer needs no exchange).
  const Partition& input_partition() const { return nodes_.front().partition; }
  SpatialBox input_read_box(const std::vector<int>& coords) const;

  // The model output's placement (split for segmentation, replicated after a dense head).
  const NodePlacement& output() const { return nodes_.at(output_); }

 private:
  GridShape grid_;
  std::vector<NodePlacement> nodes_;
  std::vector<std::vector<NodeId>> consumers_;
  NodeId output_ = 0;
};

}  // namespace fanstore::trainer
