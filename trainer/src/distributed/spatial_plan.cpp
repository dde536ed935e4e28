// Placement of every node of a model on a grid, and the checks that reject a grid before any work.
#include "trainer/distributed_plan.hpp"

#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/normalization.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"

namespace fanstore::trainer {
namespace {

const char* axis_name(std::size_t axis, std::size_t rank) {
  static const char* names3[] = {"D", "H", "W"};
  static const char* names2[] = {"H", "W"};
  return rank == 3 ? names3[axis] : names2[axis];
}

Partition partition_of(const Shape& shape, const GridShape& grid) {
  Partition p;
  for (int i = 2; i < shape.rank(); ++i) p.extents.push_back(shape[i]);
  p.parts = grid.spatial;
  return p;
}

// The layers whose split output is their input's split, position for position.
bool elementwise(const Layer& layer) {
  return dynamic_cast<const Activation*>(&layer) || dynamic_cast<const BatchNorm*>(&layer) ||
         dynamic_cast<const InstanceNorm*>(&layer) || dynamic_cast<const Dropout*>(&layer) ||
         dynamic_cast<const Add*>(&layer) || dynamic_cast<const Concat*>(&layer);
}

}  // namespace

SpatialPlan::SpatialPlan(const Model& model, GridShape grid) : grid_(std::move(grid)) {
  const std::string prefix = "--grid " + grid_.to_string() + ": ";
  const int rank = model.input_shape().spatial_rank();
  if (static_cast<int>(grid_.spatial.size()) != rank)
    throw GridError(prefix + model.name() + " is " + std::to_string(rank) + "D, so --grid takes " +
                    (rank == 3 ? "S,D,H,W" : "S,H,W"));
  nodes_.resize(model.node_count());
  consumers_.resize(model.node_count());
  output_ = model.output_node();
  nodes_[0].partition = partition_of(model.input_shape(), grid_);

  auto check_split = [&](NodeId id, const std::string& what) {
    const Partition& p = nodes_[id].partition;
    for (std::size_t a = 0; a < p.extents.size(); ++a)
      if (p.extents[a] < p.parts[a])
        throw GridError(prefix + what + " has " + axis_name(a, p.extents.size()) + " = " +
                        std::to_string(p.extents[a]) + ", fewer positions than the " + std::to_string(p.parts[a]) +
                        " ranks splitting it: use at most " + std::to_string(p.extents[a]) +
                        (p.extents[a] == 1 ? " rank" : " ranks") + " along " + axis_name(a, p.extents.size()) +
                        " or a larger input");
  };
  check_split(0, "the input " + model.input_shape().to_string());

  for (NodeId id = 1; id < model.node_count(); ++id) {
    const Layer& layer = *model.node_layer(id);
    const auto& inputs = model.node_inputs(id);
    for (auto in : inputs) consumers_[in].push_back(id);
    const NodePlacement& first = nodes_[inputs.at(0)];
    for (auto in : inputs)
      if (nodes_[in].placement != first.placement)
        throw GridError(prefix + layer.name() + " mixes split and replicated inputs");
    NodePlacement& node = nodes_[id];
    const Shape& shape = model.shape(id);
    const std::string what = layer.name() + " (" + layer.kind() + ", output " + shape.to_string() + ")";

    if (first.placement == Placement::kReplicated) {
      if (dynamic_cast<const Convolution*>(&layer) || dynamic_cast<const Pooling*>(&layer))
        throw GridError(prefix + layer.name() + ": a windowed layer after the spatial axes were reduced");
      node.placement = Placement::kReplicated;
      continue;
    }
    if (first.placement == Placement::kSplitFlat) {
      if (!dynamic_cast<const Linear*>(&layer))
        throw GridError(prefix + layer.name() + ": only a Linear layer can take a flattened split tensor");
      node.placement = Placement::kReplicated;  // partial products summed over the spatial group
      continue;
    }
    if (const auto* conv = dynamic_cast<const Convolution*>(&layer)) {
      node.window = window_of(conv->spec());
    } else if (const auto* pool = dynamic_cast<const Pooling*>(&layer)) {
      node.window = window_of(pool->spec());
    } else if (dynamic_cast<const GlobalAveragePooling*>(&layer)) {
      node.placement = Placement::kReplicated;
      continue;
    } else if (dynamic_cast<const Flatten*>(&layer)) {
      node.placement = Placement::kSplitFlat;
      node.partition = first.partition;
      continue;
    } else if (dynamic_cast<const Linear*>(&layer)) {
      throw GridError(prefix + layer.name() +
                      ": a Linear layer on a split tensor needs Flatten or global pooling first");
    } else if (!elementwise(layer)) {
      throw GridError(prefix + layer.name() + " (" + layer.kind() + ") cannot run spatially split");
    }
    node.placement = Placement::kSplit;
    node.partition = partition_of(shape, grid_);
    check_split(id, what);
    if (node.window) {
      const std::string problem = halo_width_problem(*node.window, first.partition, node.partition);
      if (!problem.empty())
        throw GridError(prefix + layer.name() + ": " + problem + "; use fewer ranks along that axis or a larger input");
      // A transposed window narrower than its stride leaves gaps a split cannot crop (window_piece throws).
      try {
        for (int i = 0; i < grid_.spatial_ranks(); ++i)
          window_piece(*node.window, node.partition.owned(grid_coords(grid_, i)), first.partition.whole());
      } catch (const std::invalid_argument& e) {
        throw GridError(prefix + layer.name() + ": " + e.what());
      }
    }
  }
}

SpatialBox SpatialPlan::input_read_box(const std::vector<int>& coords) const {
  const Partition& in = input_partition();
  SpatialBox box = in.owned(coords);
  for (NodeId consumer : consumers_.front()) {
    const NodePlacement& c = nodes_[consumer];
    if (!c.window) continue;
    const SpatialBox reads = input_box_for(*c.window, c.partition.owned(coords), in.whole());
    for (std::size_t a = 0; a < box.axes.size(); ++a)
      box.axes[a] = {std::min(box.axes[a].lo, reads.axes[a].lo), std::max(box.axes[a].hi, reads.axes[a].hi)};
  }
  return box;
}

}  // namespace fanstore::trainer
