// Hybrid sample x spatial parallelism: index ranges and boxes, how a tensor's spatial extent is split
// over a process grid (uneven splits included), --grid parsing and the grid's communicators.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/distributed.hpp"

namespace fanstore::trainer {

// A --grid that does not parse or cannot run a model, another option every rank checks alike, or any error that
// every rank learns of at the same point (agree_on_errors, distributed_commands.hpp): the message is one line
// that says what to change. Every rank has it, so rank 0 prints it and every rank exits (no MPI_Abort needed).
class GridError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Half-open index range [lo, hi) along one axis, in global coordinates.
struct Range {
  std::int64_t lo = 0, hi = 0;
  std::int64_t size() const { return hi > lo ? hi - lo : 0; }
  bool empty() const { return hi <= lo; }
  bool contains(const Range& r) const { return r.empty() || (lo <= r.lo && r.hi <= hi); }
  Range intersect(const Range& r) const { return {std::max(lo, r.lo), std::min(hi, r.hi)}; }
  bool operator==(const Range&) const = default;
};

// Part `index` of `parts` of [0, extent): the first extent % parts parts get one element more, so
// sizes differ by at most one (an edge not divisible by the split still works).
Range split_range(std::int64_t extent, int parts, int index);

// A spatial box, one Range per spatial axis in tensor order: (D, H, W) or (H, W).
struct SpatialBox {
  std::vector<Range> axes;

  int rank() const { return static_cast<int>(axes.size()); }
  bool empty() const;
  std::int64_t volume() const;  // positions in the box, 0 if empty
  bool contains(const SpatialBox& b) const;
  SpatialBox intersect(const SpatialBox& b) const;
  // Extents per axis (for a tensor shape).
  std::vector<std::int64_t> extents() const;
  std::string to_string() const;  // "[0,4)x[2,8)"
  bool operator==(const SpatialBox&) const = default;
};

// How a tensor's spatial extents are split over the spatial grid: part c of axis i is
// split_range(extents[i], parts[i], c). A layer may be split more coarsely than the grid (its extent
// is smaller than the grid, or its halo wider than a slab): then parts[i] divides ranks[i], and the
// ranks[i] / parts[i] consecutive ranks along axis i hold the same part (its replicas).
struct Partition {
  std::vector<std::int64_t> extents;  // global spatial extents (D, H, W) or (H, W)
  std::vector<int> parts;             // parts per axis
  std::vector<int> ranks;             // grid size per axis (empty: one rank per part, = parts)

  // `coords`: the rank's grid coordinates.
  SpatialBox owned(const std::vector<int>& coords) const;
  std::vector<int> part_of(const std::vector<int>& coords) const;
  // The replica that contributes the part to sums over the spatial group: the first along every axis.
  bool first_replica(const std::vector<int>& coords) const;
  // Ranks holding each part (1 when the partition splits as finely as the grid).
  int replicas() const;
  SpatialBox whole() const;
  bool operator==(const Partition&) const = default;
};

// The grid of a run: `samples` sample groups, each splitting its samples' spatial axes over
// `spatial` ranks per axis ((D, H, W) for 3D models, (H, W) for 2D).
struct GridShape {
  int samples = 1;
  std::vector<int> spatial;

  int spatial_ranks() const;  // product of spatial
  int ranks() const { return samples * spatial_ranks(); }
  bool spatially_split() const { return spatial_ranks() > 1; }
  std::string to_string() const;  // "2,2,2,1": the --grid text
  bool operator==(const GridShape&) const = default;
};

// fanstore-train's grid options (--grid, --explain, --sync-bn, --halo-overlap, --layer-split,
// --shard-state, --shard-weights).
struct GridOptions {
  std::string grid;      // "S,D,H,W" / "S,H,W", "auto", or empty (data parallelism over every rank)
  bool explain = false;  // with "auto": print every candidate's prediction and stop
  bool sync_bn = false;
  bool overlap = true;         // interior computation while halos travel
  std::string layer_split;     // --layer-split "NAME=D,H,W;...": parts per layer instead of the default plan's
  bool shard_state = true;     // gradients and optimizer state sharded over the spatial group (ZeRO stage 2)
  bool shard_weights = false;  // with shard_state, the weights too, gathered per layer as it runs (stage 3)
  int auto_trials = 3;         // --grid auto: how many of the best predictions run three steps to choose from
};

// Plain data parallelism over `ranks` ranks: ranks sample groups of one spatial rank each.
GridShape data_parallel_grid(int ranks, int spatial_rank);

// The most ranks a grid may have, in all and along any axis.
inline constexpr int kMaxGridRanks = 1 << 20;

// The comma-separated positive integers (at most kMaxGridRanks) of `text`, or nothing with *bad = the
// first item that is not one.
std::optional<std::vector<int>> parse_counts(const std::string& text, std::string* bad);

// Parses --grid "S,D,H,W" (spatial_rank 3) or "S,H,W" (2), of at most kMaxGridRanks ranks in all. Throws
// GridError with one line that says what to pass instead ("auto" is handled by the caller).
GridShape parse_grid(const std::string& text, int spatial_rank);

// Throws GridError when the grid does not have exactly `ranks` ranks, naming the product
// and the number of ranks that was started.
void check_grid_ranks(const GridShape& grid, int ranks);

// Spatial coordinates of spatial index i (row-major over the spatial axes) and back.
std::vector<int> grid_coords(const GridShape& grid, int spatial_index);
int grid_spatial_index(const GridShape& grid, const std::vector<int>& coords);

// This rank's place in the grid and its communicators. World rank = sample_group * P + spatial index
// (P = spatial ranks), so a spatial group is P consecutive ranks: one node under a by-slot mapping,
// where the chatty halo exchange stays in shared memory.
class ProcessGrid {
 public:
  // Collective over `world` (splits it twice); `world` must outlive the grid.
  ProcessGrid(Communicator& world, GridShape shape);

  const GridShape& shape() const { return shape_; }
  int sample_group() const { return sample_group_; }
  int spatial_index() const { return spatial_index_; }
  const std::vector<int>& coords() const { return coords_; }

  // Every rank (weight gradients, global batch norm with --sync-bn).
  Communicator& world() { return world_; }
  // The ranks that share this rank's samples, spatial index = rank (halos, statistics, losses).
  Communicator& spatial() { return *spatial_; }
  // The ranks at this rank's spatial position in every sample group, sample group = rank (the second
  // step of --sync-bn statistics; data-parallel sums of per-sample metrics).
  Communicator& samples() { return *samples_; }

 private:
  Communicator& world_;
  GridShape shape_;
  int sample_group_ = 0, spatial_index_ = 0;
  std::vector<int> coords_;
  std::unique_ptr<Communicator> spatial_, samples_;
};

}  // namespace fanstore::trainer
