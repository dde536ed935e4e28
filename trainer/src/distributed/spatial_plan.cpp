// Placement of every node of a model on a grid: how finely each layer is split, where a tensor is
// redistributed between layers split differently, and the checks that reject a plan before any work.
#include <algorithm>
#include <sstream>

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

std::vector<std::int64_t> spatial_extents(const Shape& shape) {
  std::vector<std::int64_t> e;
  for (int i = 2; i < shape.rank(); ++i) e.push_back(shape[i]);
  return e;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// The layers whose split output is their input's split, position for position.
bool elementwise(const Layer& layer) {
  return dynamic_cast<const Activation*>(&layer) || dynamic_cast<const BatchNorm*>(&layer) ||
         dynamic_cast<const InstanceNorm*>(&layer) || dynamic_cast<const Dropout*>(&layer) ||
         dynamic_cast<const Add*>(&layer) || dynamic_cast<const Concat*>(&layer);
}

// Why `parts` ranks along `axis` cannot compute a layer (with `window`, from an input of extents `in`
// to an output of extents `out`), or "" when they can.
std::string axis_problem(const std::optional<Window>& window, const std::vector<std::int64_t>& in,
                         const std::vector<std::int64_t>& out, std::size_t axis, int parts) {
  const std::string name = axis_name(axis, out.size());
  auto few = [&](const char* what, std::int64_t extent) {
    return std::string(what) + " " + name + " = " + std::to_string(extent) + ", fewer positions than the " +
           std::to_string(parts) + " parts splitting it";
  };
  if (out[axis] < parts) return few("has", out[axis]);
  if (!window) return "";
  if (in[axis] < parts) return few("reads an input with", in[axis]);
  std::vector<int> p(out.size(), 1);
  p[axis] = parts;
  const Partition pin{in, p, {}}, pout{out, p, {}};
  if (auto problem = halo_width_problem(*window, pin, pout); !problem.empty()) return problem;
  try {
    // A transposed window narrower than its stride leaves gaps a split cannot crop.
    std::vector<int> coords(out.size(), 0);
    for (coords[axis] = 0; coords[axis] < parts; ++coords[axis]) window_piece(*window, pout.owned(coords), pin.whole());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

LayerSplits parse_layer_splits(const std::string& text, int spatial_rank) {
  LayerSplits out;
  const std::string form = spatial_rank == 3 ? "NAME=D,H,W" : "NAME=H,W";
  const auto trim = [](const std::string& t) {
    const auto first = t.find_first_not_of(" \t"), last = t.find_last_not_of(" \t");
    return first == std::string::npos ? std::string() : t.substr(first, last - first + 1);
  };
  std::stringstream entries(text);
  std::string entry;
  std::size_t count = 0;
  while (std::getline(entries, entry, ';')) {
    ++count;
    if (trim(entry).empty())
      throw GridError("--layer-split \"" + text + "\": entry " + std::to_string(count) +
                      " is empty (two ';' in a row, or one at an end); expected " + form + " entries separated by ';'");
    const auto eq = entry.find('=');
    const std::string name = trim(entry.substr(0, eq == std::string::npos ? 0 : eq));
    if (eq == std::string::npos || name.empty())
      throw GridError("--layer-split \"" + entry + "\": expected " + form + " (entries separated by ';')");
    std::string bad;
    const auto parsed = parse_counts(trim(entry.substr(eq + 1)), &bad);
    if (!parsed) {
      const bool digits = !bad.empty() && bad.find_first_not_of("0123456789") == std::string::npos;
      const bool zero = digits && bad.find_first_not_of('0') == std::string::npos;
      throw GridError("--layer-split \"" + entry + "\": \"" + bad + "\" " +
                      (digits && !zero ? "is out of range (a part count is from 1 to " + std::to_string(kMaxGridRanks) +
                                             ", and divides the grid's ranks along its axis)"
                                       : "is not a positive number (" + form + ")"));
    }
    const std::vector<int>& parts = *parsed;
    if (static_cast<int>(parts.size()) != spatial_rank)
      throw GridError("--layer-split \"" + entry + "\": expected " + form + ", " + std::to_string(spatial_rank) +
                      " numbers after the name");
    if (!out.emplace(name, parts).second)
      throw GridError("--layer-split \"" + text + "\": \"" + name + "\" is given twice; give each layer one split");
  }
  const std::string whole = trim(text);
  if (!whole.empty() && whole.back() == ';')
    throw GridError("--layer-split \"" + text + "\": it ends with ';'; expected " + form + " entries separated by ';'");
  return out;
}

SpatialPlan::SpatialPlan(const Model& model, GridShape grid, const LayerSplits& forced) : grid_(std::move(grid)) {
  const std::string prefix = "--grid " + grid_.to_string() + ": ";
  const int rank = model.input_shape().spatial_rank();
  const auto axes = static_cast<std::size_t>(rank);
  if (static_cast<int>(grid_.spatial.size()) != rank)
    throw GridError(prefix + model.name() + " is " + std::to_string(rank) + "D, so --grid takes " +
                    (rank == 3 ? "S,D,H,W" : "S,H,W"));
  auto partition = [&](const Shape& shape, const std::vector<int>& parts) {
    return Partition{spatial_extents(shape), parts, grid_.spatial};
  };
  // The finest split each axis allows: the largest divisor of the grid's ranks along it that works.
  auto finest = [&](const std::optional<Window>& window, const Shape& in, const Shape& out) {
    std::vector<int> parts(axes, 1);
    for (std::size_t a = 0; a < axes; ++a)
      for (int d = grid_.spatial[a]; d > 1; --d)
        if (grid_.spatial[a] % d == 0 &&
            axis_problem(window, spatial_extents(in), spatial_extents(out), a, d).empty()) {
          parts[a] = d;
          break;
        }
    return parts;
  };
  // A --layer-split entry: each part count divides the grid's ranks along its axis and works.
  std::map<std::string, bool> used;
  for (const auto& [name, parts] : forced) used[name] = false;
  auto forced_parts = [&](const Layer& layer, const std::optional<Window>& window, const Shape& in,
                          const Shape& out) -> std::optional<std::vector<int>> {
    const auto it = forced.find(layer.name());
    if (it == forced.end()) return std::nullopt;
    used[layer.name()] = true;
    const std::string what = "--layer-split " + layer.name() + "=" + join(it->second) + ": ";
    for (std::size_t a = 0; a < axes; ++a) {
      const int d = it->second[a], ranks = grid_.spatial[a];
      if (ranks % d != 0)
        throw GridError(what + std::to_string(d) + " parts along " + axis_name(a, axes) + " do not divide the grid's " +
                        std::to_string(ranks) + " ranks along it: use a divisor of " + std::to_string(ranks));
      if (auto problem = axis_problem(window, spatial_extents(in), spatial_extents(out), a, d); !problem.empty())
        throw GridError(what + layer.name() + " (" + layer.kind() + ", output " + out.to_string() + ")" +
                        (problem.rfind("along", 0) == 0 ? ": " : " ") + problem + ": use fewer parts along " +
                        axis_name(a, axes) +
                        " for it, or leave it out of --layer-split (the default plan splits each layer as finely as "
                        "it can)");
    }
    return it->second;
  };

  nodes_.resize(model.node_count());
  consumers_.resize(model.node_count());
  producers_.resize(model.node_count());
  output_ = model.output_node();
  nodes_[0].partition = partition(model.input_shape(), finest(std::nullopt, model.input_shape(), model.input_shape()));

  for (NodeId id = 1; id < model.node_count(); ++id) {
    const Layer& layer = *model.node_layer(id);
    const auto& inputs = model.node_inputs(id);
    for (auto in : inputs) consumers_[in].push_back(id);
    producers_[id] = inputs;
    const NodePlacement& first = nodes_[inputs.at(0)];
    for (auto in : inputs)
      if (nodes_[in].placement != first.placement)
        throw GridError(prefix + layer.name() + " mixes split and replicated inputs");
    NodePlacement& node = nodes_[id];
    for (auto in : inputs) node.inputs.push_back(nodes_[in].partition);
    const Shape& shape = model.shape(id);

    auto not_split = [&]() {
      if (forced.count(layer.name()))
        throw GridError("--layer-split " + layer.name() + ": " + layer.name() + " (" + layer.kind() +
                        ") is not spatially split (it runs after the spatial axes were reduced): leave it out");
    };
    if (first.placement == Placement::kReplicated) {
      if (dynamic_cast<const Convolution*>(&layer) || dynamic_cast<const Pooling*>(&layer))
        throw GridError(prefix + layer.name() + ": a windowed layer after the spatial axes were reduced");
      not_split();
      node.placement = Placement::kReplicated;
      continue;
    }
    if (first.placement == Placement::kSplitFlat) {
      if (!dynamic_cast<const Linear*>(&layer))
        throw GridError(prefix + layer.name() + ": only a Linear layer can take a flattened split tensor");
      not_split();
      node.placement = Placement::kReplicated;  // partial products summed over the spatial group
      continue;
    }
    std::vector<int> parts;
    if (const auto* conv = dynamic_cast<const Convolution*>(&layer)) {
      node.window = window_of(conv->spec());
    } else if (const auto* pool = dynamic_cast<const Pooling*>(&layer)) {
      node.window = window_of(pool->spec());
    } else if (dynamic_cast<const GlobalAveragePooling*>(&layer)) {
      not_split();
      node.placement = Placement::kReplicated;
      continue;
    } else if (dynamic_cast<const Flatten*>(&layer)) {
      not_split();
      node.placement = Placement::kSplitFlat;
      node.partition = first.partition;
      continue;
    } else if (dynamic_cast<const Linear*>(&layer)) {
      throw GridError(prefix + layer.name() +
                      ": a Linear layer on a split tensor needs Flatten or global pooling first");
    } else if (!elementwise(layer)) {
      throw GridError(prefix + layer.name() + " (" + layer.kind() + ") cannot run spatially split");
    }
    const Shape& in_shape = model.shape(inputs[0]);
    if (auto f = forced_parts(layer, node.window, in_shape, shape)) {
      parts = *f;
    } else if (node.window) {
      parts = finest(node.window, in_shape, shape);
    } else {
      // An element-wise layer keeps its input's split (the finest of its inputs' when they differ).
      parts.assign(axes, 1);
      for (auto in : inputs)
        for (std::size_t a = 0; a < axes; ++a) parts[a] = std::max(parts[a], nodes_[in].partition.parts[a]);
    }
    node.placement = Placement::kSplit;
    node.partition = partition(shape, parts);
    for (std::size_t k = 0; k < inputs.size(); ++k) node.inputs[k] = partition(model.shape(inputs[k]), parts);
  }
  for (const auto& [name, was_used] : used) {
    if (was_used) continue;
    if (name == "input")  // the first line of --explain's plan, but no layer
      throw GridError(
          "--layer-split \"input\": the input is no layer; it is split as the layers that read it "
          "need, so split those (--grid " +
          grid_.to_string() + " --explain lists the layers)");
    throw GridError("--layer-split \"" + name + "\": " + model.name() + " has no layer of that name (--grid " +
                    grid_.to_string() + " --explain lists them)");
  }
}

bool SpatialPlan::redistributes(NodeId id, std::size_t k) const {
  const NodePlacement& node = nodes_.at(id);
  return node.placement == Placement::kSplit && !(node.inputs.at(k) == nodes_.at(input_of(id, k)).partition);
}

SpatialBox SpatialPlan::input_read_box(const std::vector<int>& coords) const {
  const Partition& in = input_partition();
  SpatialBox box = in.owned(coords);
  for (NodeId consumer : consumers_.front()) {
    const NodePlacement& c = nodes_[consumer];
    // A consumer split otherwise gets the slab redistributed, not the loaded halo.
    if (!c.window || !(c.inputs.at(0) == in)) continue;
    const SpatialBox reads = input_box_for(*c.window, c.partition.owned(coords), in.whole());
    for (std::size_t a = 0; a < box.axes.size(); ++a)
      box.axes[a] = {std::min(box.axes[a].lo, reads.axes[a].lo), std::max(box.axes[a].hi, reads.axes[a].hi)};
  }
  return box;
}

std::string SpatialPlan::describe(const Model& model) const {
  std::ostringstream s;
  const char* form = grid_.spatial.size() == 3 ? "D,H,W" : "H,W";
  s << "plan on --grid " << grid_.to_string() << " (parts per " << form << "; \"x R\": each part held by R ranks)\n";
  for (NodeId id = 0; id < model.node_count(); ++id) {
    const NodePlacement& n = nodes_[id];
    const std::string name = id == 0 ? "input" : model.node_layer(id)->name();
    const std::string kind = id == 0 ? "" : model.node_layer(id)->kind();
    s << "  " << name << " " << (kind.empty() ? "" : "(" + kind + ", ") << model.shape(id).to_string()
      << (kind.empty() ? "" : ")") << ": ";
    if (n.placement == Placement::kReplicated) {
      s << "replicated";
    } else {
      s << (n.placement == Placement::kSplitFlat ? "flattened, split " : "split ") << join(n.partition.parts);
      if (n.partition.replicas() > 1) s << " x " << n.partition.replicas();
      for (std::size_t k = 0; k < n.inputs.size(); ++k)
        if (redistributes(id, k))
          s << "; input " << k << " redistributed from " << join(nodes_[input_of(id, k)].partition.parts);
    }
    if (id == 0) s << " (not a layer: split as the layers that read it need)";
    s << "\n";
  }
  return s.str();
}

}  // namespace fanstore::trainer
