// Ranges, boxes and partitions of the spatial axes; --grid parsing; the grid's communicators.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "trainer/distributed_grid.hpp"

namespace fanstore::trainer {

Range split_range(std::int64_t extent, int parts, int index) {
  if (parts < 1 || index < 0 || index >= parts || extent < 0)
    throw std::invalid_argument("split_range: part " + std::to_string(index) + " of " + std::to_string(parts));
  const std::int64_t base = extent / parts, extra = extent % parts;
  const std::int64_t lo = index * base + std::min<std::int64_t>(index, extra);
  return {lo, lo + base + (index < extra ? 1 : 0)};
}

bool SpatialBox::empty() const {
  for (const auto& a : axes)
    if (a.empty()) return true;
  return false;
}

std::int64_t SpatialBox::volume() const {
  std::int64_t v = 1;
  for (const auto& a : axes) v *= a.size();
  return v;
}

bool SpatialBox::contains(const SpatialBox& b) const {
  if (b.empty()) return true;
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (!axes[i].contains(b.axes.at(i))) return false;
  return true;
}

SpatialBox SpatialBox::intersect(const SpatialBox& b) const {
  SpatialBox out;
  for (std::size_t i = 0; i < axes.size(); ++i) out.axes.push_back(axes[i].intersect(b.axes.at(i)));
  return out;
}

std::vector<std::int64_t> SpatialBox::extents() const {
  std::vector<std::int64_t> e;
  for (const auto& a : axes) e.push_back(a.size());
  return e;
}

std::string SpatialBox::to_string() const {
  std::ostringstream s;
  for (std::size_t i = 0; i < axes.size(); ++i) s << (i ? "x" : "") << "[" << axes[i].lo << "," << axes[i].hi << ")";
  return s.str();
}

SpatialBox Partition::owned(const std::vector<int>& coords) const {
  const std::vector<int> part = part_of(coords);
  SpatialBox b;
  for (std::size_t i = 0; i < extents.size(); ++i) b.axes.push_back(split_range(extents[i], parts.at(i), part[i]));
  return b;
}

std::vector<int> Partition::part_of(const std::vector<int>& coords) const {
  if (ranks.empty()) return coords;
  std::vector<int> part(coords.size());
  for (std::size_t i = 0; i < coords.size(); ++i) part[i] = coords[i] / (ranks.at(i) / parts.at(i));
  return part;
}

bool Partition::first_replica(const std::vector<int>& coords) const {
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (coords.at(i) % (ranks[i] / parts.at(i)) != 0) return false;
  return true;
}

int Partition::replicas() const {
  int r = 1;
  for (std::size_t i = 0; i < ranks.size(); ++i) r *= ranks[i] / parts.at(i);
  return r;
}

SpatialBox Partition::whole() const {
  SpatialBox b;
  for (auto e : extents) b.axes.push_back({0, e});
  return b;
}

int GridShape::spatial_ranks() const {
  int p = 1;
  for (int s : spatial) p *= s;
  return p;
}

std::string GridShape::to_string() const {
  std::string s = std::to_string(samples);
  for (int p : spatial) s += "," + std::to_string(p);
  return s;
}

GridShape data_parallel_grid(int ranks, int spatial_rank) {
  return GridShape{ranks, std::vector<int>(static_cast<std::size_t>(spatial_rank), 1)};
}

std::optional<std::vector<int>> parse_counts(const std::string& text, std::string* bad) {
  std::vector<int> numbers;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long value = 0;
    try {
      value = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || value < 1 || value > kMaxGridRanks) {
      *bad = item;
      return std::nullopt;
    }
    numbers.push_back(static_cast<int>(value));
  }
  return numbers;
}

GridShape parse_grid(const std::string& text, int spatial_rank) {
  const std::string form = spatial_rank == 3 ? "S,D,H,W" : "S,H,W";
  const std::string expected = "--grid takes " + form + " (sample groups, then ranks per spatial axis" +
                               (spatial_rank == 3 ? " D, H, W" : " H, W") + "), e.g. " +
                               (spatial_rank == 3 ? "1,2,2,1" : "1,2,2") + ", or auto";
  std::string bad;
  const auto parsed = parse_counts(text, &bad);
  if (!parsed)
    throw GridError("--grid " + text + ": '" + bad + "' is not an integer from 1 to " + std::to_string(kMaxGridRanks) +
                    "; " + expected);
  const std::vector<int>& numbers = *parsed;
  if (!text.empty() && text.back() == ',') throw GridError("--grid " + text + ": it ends with a comma; " + expected);
  if (text.empty() || numbers.size() != static_cast<std::size_t>(spatial_rank) + 1)
    throw GridError("--grid " + text + ": " + std::to_string(numbers.size()) + " numbers, but for this model " +
                    expected);
  // The product in 64 bits: an int would wrap, and a grid of 2^32 + 1 ranks would pass as one of 1.
  std::int64_t product = 1;
  for (int n : numbers) product = std::min<std::int64_t>(product * n, std::int64_t{kMaxGridRanks} + 1);
  if (product > kMaxGridRanks)
    throw GridError("--grid " + text + ": more than " + std::to_string(kMaxGridRanks) + " ranks in all; " + expected);
  return GridShape{numbers[0], std::vector<int>(numbers.begin() + 1, numbers.end())};
}

void check_grid_ranks(const GridShape& grid, int ranks) {
  if (grid.ranks() != ranks)
    throw GridError("--grid " + grid.to_string() + " needs " + std::to_string(grid.ranks()) +
                    " ranks (the product), but " + std::to_string(ranks) +
                    " were started: pass a grid whose product is " + std::to_string(ranks) + " or start " +
                    std::to_string(grid.ranks()) + " ranks");
}

std::vector<int> grid_coords(const GridShape& grid, int spatial_index) {
  std::vector<int> c(grid.spatial.size());
  for (std::size_t i = grid.spatial.size(); i-- > 0;) {
    c[i] = spatial_index % grid.spatial[i];
    spatial_index /= grid.spatial[i];
  }
  return c;
}

int grid_spatial_index(const GridShape& grid, const std::vector<int>& coords) {
  int index = 0;
  for (std::size_t i = 0; i < grid.spatial.size(); ++i) index = index * grid.spatial[i] + coords.at(i);
  return index;
}

ProcessGrid::ProcessGrid(Communicator& world, GridShape shape) : world_(world), shape_(std::move(shape)) {
  check_grid_ranks(shape_, world.size());
  const int p = shape_.spatial_ranks();
  sample_group_ = world.rank() / p;
  spatial_index_ = world.rank() % p;
  coords_ = grid_coords(shape_, spatial_index_);
  spatial_ = world.split(sample_group_, spatial_index_);
  samples_ = world.split(spatial_index_, sample_group_);
}

}  // namespace fanstore::trainer
