// Halo geometry: windows of convolution/pooling layers, the input box a rank reads, interior and
// boundary pieces, and which neighbour sends which box (faces, edges and corners).
#include <sstream>
#include <stdexcept>

#include "trainer/distributed_halo.hpp"

namespace fanstore::trainer {
namespace {

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -floor_div(-a, b); }

Range clip(const Range& r, const Range& volume) { return r.intersect(volume); }

// Neighbour coordinates (all 3^d - 1 offsets that stay inside the grid).
std::vector<std::vector<int>> neighbours(const std::vector<int>& coords, const std::vector<int>& parts) {
  std::vector<std::vector<int>> out;
  const std::size_t r = coords.size();
  std::vector<int> offset(r, -1);
  while (true) {
    bool zero = true, inside = true;
    std::vector<int> q(r);
    for (std::size_t i = 0; i < r; ++i) {
      q[i] = coords[i] + offset[i];
      zero = zero && offset[i] == 0;
      inside = inside && q[i] >= 0 && q[i] < parts[i];
    }
    if (!zero && inside) out.push_back(q);
    std::size_t i = 0;
    while (i < r && offset[i] == 1) offset[i++] = -1;
    if (i == r) break;
    ++offset[i];
  }
  return out;
}

// Every coordinate vector of a grid with `dims` positions per axis, row-major.
std::vector<std::vector<int>> all_coords(const std::vector<int>& dims) {
  std::vector<std::vector<int>> out;
  std::vector<int> c(dims.size(), 0);
  while (true) {
    out.push_back(c);
    std::size_t i = dims.size();
    while (i > 0 && ++c[i - 1] == dims[i - 1]) c[--i] = 0;
    if (i == 0) return out;
  }
}

int peer_index(const std::vector<int>& coords, const std::vector<int>& parts) {
  int index = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) index = index * parts[i] + coords[i];
  return index;
}

std::string axis_name(std::size_t axis, std::size_t rank) {
  static const char* names3[] = {"D", "H", "W"};
  static const char* names2[] = {"H", "W"};
  return rank == 3 ? names3[axis] : names2[axis];
}

}  // namespace

Range AxisWindow::reads(const Range& out) const {
  if (out.empty()) return {0, 0};
  if (!transposed) return {out.lo * stride - padding, (out.hi - 1) * stride - padding + extent};
  // Output o of a transposed window receives from inputs i with i*stride <= o + padding < i*stride + extent.
  return {ceil_div(out.lo + padding - extent + 1, stride), floor_div(out.hi - 1 + padding, stride) + 1};
}

Window window_of(const ConvolutionSpec& spec) {
  Window w;
  for (std::size_t i = 0; i < spec.kernel.size(); ++i)
    w.push_back({spec.dilation[i] * (spec.kernel[i] - 1) + 1, spec.stride[i], spec.padding_lo[i], spec.transposed});
  return w;
}

Window window_of(const PoolingSpec& spec) {
  Window w;
  for (std::size_t i = 0; i < spec.kernel.size(); ++i)
    w.push_back({spec.kernel[i], spec.stride[i], spec.padding_lo[i], false});
  return w;
}

SpatialBox input_box_for(const Window& window, const SpatialBox& out, const SpatialBox& input_volume) {
  SpatialBox in;
  for (std::size_t i = 0; i < window.size(); ++i)
    in.axes.push_back(clip(window[i].reads(out.axes[i]), input_volume.axes[i]));
  return in;
}

WindowPiece window_piece(const Window& window, const SpatialBox& out, const SpatialBox& input_volume) {
  WindowPiece p{out, input_box_for(window, out, input_volume), {}, {}};
  for (std::size_t i = 0; i < window.size(); ++i) {
    const AxisWindow& w = window[i];
    const Range& in = p.in.axes[i];
    const Range& o = out.axes[i];
    std::int64_t lo, hi;
    if (!w.transposed) {
      const Range wanted = w.reads(o);
      lo = in.lo - wanted.lo;
      hi = wanted.hi - in.hi;
    } else {
      // A transposed kernel on inputs [in.lo, in.hi) produces outputs [in.lo*s - p, (in.hi-1)*s - p + extent)
      // before cropping; crop down to `o`.
      lo = o.lo - (in.lo * w.stride - w.padding);
      hi = ((in.hi - 1) * w.stride - w.padding + w.extent) - o.hi;
    }
    if (lo < 0 || hi < 0)
      throw std::invalid_argument("spatial split: a window of extent " + std::to_string(w.extent) + " and stride " +
                                  std::to_string(w.stride) + " cannot be split along axis " + std::to_string(i));
    p.pad_lo.push_back(lo);
    p.pad_hi.push_back(hi);
  }
  return p;
}

std::vector<WindowPiece> window_pieces(const Window& window, const SpatialBox& out, const SpatialBox& owned,
                                       const SpatialBox& input_volume, bool split) {
  if (!split || out.empty()) return {window_piece(window, out, input_volume)};
  SpatialBox interior;
  for (std::size_t a = 0; a < window.size(); ++a) {
    const Range& o = out.axes[a];
    Range inner{o.hi, o.hi};
    for (std::int64_t k = o.lo; k < o.hi; ++k) {
      if (!owned.axes[a].contains(clip(window[a].reads({k, k + 1}), input_volume.axes[a]))) continue;
      if (inner.lo == o.hi) inner.lo = k;
      inner.hi = k + 1;
    }
    interior.axes.push_back(inner);
  }
  if (interior.empty() || interior == out) return {window_piece(window, out, input_volume)};
  std::vector<WindowPiece> pieces{window_piece(window, interior, input_volume)};
  for (std::size_t a = 0; a < window.size(); ++a) {
    for (const Range part : {Range{out.axes[a].lo, interior.axes[a].lo}, Range{interior.axes[a].hi, out.axes[a].hi}}) {
      if (part.empty()) continue;
      SpatialBox b;
      for (std::size_t k = 0; k < window.size(); ++k)
        b.axes.push_back(k < a ? interior.axes[k] : k == a ? part : out.axes[k]);
      pieces.push_back(window_piece(window, b, input_volume));
    }
  }
  return pieces;
}

bool overlaps_in_pieces(bool overlap, bool exchanges, std::int64_t slab_floats, std::int64_t weight_floats) {
  return overlap && exchanges && slab_floats >= weight_floats;
}

std::int64_t HaloPlan::halo_volume() const {
  std::int64_t v = 0;
  for (const auto& p : receive) v += p.box.volume();
  return v;
}

std::int64_t HaloPlan::send_volume() const {
  std::int64_t v = 0;
  for (const auto& p : send) v += p.box.volume();
  return v;
}

std::string halo_width_problem(const Window& window, const Partition& in, const Partition& out) {
  const std::size_t r = window.size();
  for (std::size_t a = 0; a < r; ++a) {
    const int parts = in.parts[a];
    const Range volume{0, in.extents[a]};
    for (int c = 0; c < parts; ++c) {
      const Range reads = clip(window[a].reads(split_range(out.extents[a], parts, c)), volume);
      const Range held{c > 0 ? split_range(in.extents[a], parts, c - 1).lo : 0,
                       c + 1 < parts ? split_range(in.extents[a], parts, c + 1).hi : in.extents[a]};
      if (!held.contains(reads)) {
        std::ostringstream s;
        s << "along " << axis_name(a, r) << " the halo is wider than a slab: spatial part " << c << " of " << parts
          << " reads input [" << reads.lo << "," << reads.hi << ") of " << in.extents[a]
          << " but it and its neighbours hold only [" << held.lo << "," << held.hi << ")";
        return s.str();
      }
    }
  }
  return "";
}

HaloPlan make_halo_plan(const Window& window, const Partition& in, const Partition& out,
                        const std::vector<int>& coords) {
  if (in.parts != out.parts || in.ranks != out.ranks)
    throw std::invalid_argument("halo plan: the input and output of a windowed layer must be split alike");
  if (const auto problem = halo_width_problem(window, in, out); !problem.empty()) throw std::invalid_argument(problem);
  // The exchange runs within one copy of the split: the ranks holding the neighbouring parts with
  // this rank's replica offset (every rank when the split is as fine as the grid).
  const Partition in_parts{in.extents, in.parts, {}}, out_parts{out.extents, out.parts, {}};
  const std::vector<int> grid = in.ranks.empty() ? in.parts : in.ranks;
  const std::vector<int> part = in.part_of(coords);
  const SpatialBox volume = in.whole();
  HaloPlan plan;
  plan.owned = in_parts.owned(part);
  plan.local = input_box_for(window, out_parts.owned(part), volume);
  for (const auto& q : neighbours(part, in.parts)) {
    std::vector<int> peer_coords(q.size());
    for (std::size_t a = 0; a < q.size(); ++a) {
      const int copies = grid[a] / in.parts[a];
      peer_coords[a] = q[a] * copies + coords[a] % copies;
    }
    const int peer = peer_index(peer_coords, grid);
    const SpatialBox receive = plan.local.intersect(in_parts.owned(q));
    if (!receive.empty()) plan.receive.push_back({peer, receive});
    const SpatialBox send = plan.owned.intersect(input_box_for(window, out_parts.owned(q), volume));
    if (!send.empty()) plan.send.push_back({peer, send});
  }
  return plan;
}

HaloPlan make_redistribution_plan(const Partition& from, const Partition& to, const std::vector<int>& coords) {
  const std::vector<int> grid = from.ranks.empty() ? from.parts : from.ranks;
  if (from.extents != to.extents || grid != (to.ranks.empty() ? to.parts : to.ranks))
    throw std::invalid_argument("redistribution plan: the two partitions cover different tensors or grids");
  // The replica of `part` (of `from`) that serves the rank at `receiver`: the one with its offset.
  auto holder = [&](const std::vector<int>& part, const std::vector<int>& receiver) {
    std::vector<int> c(grid.size());
    for (std::size_t a = 0; a < grid.size(); ++a) {
      const int copies = grid[a] / from.parts[a];
      c[a] = part[a] * copies + receiver[a] % copies;
    }
    return c;
  };
  const Partition from_parts{from.extents, from.parts, {}};
  const std::vector<int> mine = from.part_of(coords);
  HaloPlan plan;
  plan.owned = from.owned(coords);
  plan.local = to.owned(coords);
  for (const auto& part : all_coords(from.parts)) {
    if (part == mine) continue;  // held here: copied locally
    const SpatialBox box = plan.local.intersect(from_parts.owned(part));
    if (!box.empty()) plan.receive.push_back({peer_index(holder(part, coords), grid), box});
  }
  for (const auto& other : all_coords(grid)) {
    if (other == coords || from.part_of(other) == mine || holder(mine, other) != coords) continue;
    const SpatialBox box = plan.owned.intersect(to.owned(other));
    if (!box.empty()) plan.send.push_back({peer_index(other, grid), box});
  }
  return plan;
}

}  // namespace fanstore::trainer
