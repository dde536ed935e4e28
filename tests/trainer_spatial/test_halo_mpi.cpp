// The halo exchange under MPI (2 and 4 ranks): every rank's local tensor after the exchange equals the
// global tensor on the box its layer reads (faces, edges, corners; uneven splits; strided, dilated and
// transposed windows), and the reverse exchange adds each halo gradient into its owner exactly once.
#include <gtest/gtest.h>

#include "spatial_testing.hpp"
#include "trainer/distributed_halo.hpp"

namespace fanstore::trainer {
namespace {

using testing::world;

// Integer-valued, so sums of a few copies are exact in float.
float value_at(std::int64_t plane, const std::vector<std::int64_t>& pos) {
  std::int64_t v = 1 + plane * 37;
  for (std::size_t i = 0; i < pos.size(); ++i) v += pos[i] * (i == 0 ? 11 : i == 1 ? 5 : 2);
  return static_cast<float>(v % 1000);
}

// (N, C, *box) filled with value_at of the global position.
Tensor fill(std::int64_t n, std::int64_t c, const SpatialBox& box) {
  Shape s{n, c};
  for (auto e : box.extents()) s.dims.push_back(e);
  Tensor t = Tensor::zeros(s);
  const auto ext = box.extents();
  const std::int64_t volume = box.volume();
  for (std::int64_t p = 0; p < n * c; ++p)
    for (std::int64_t i = 0; i < volume; ++i) {
      std::vector<std::int64_t> pos(ext.size());
      std::int64_t rest = i;
      for (std::size_t a = ext.size(); a-- > 0;) {
        pos[a] = box.axes[a].lo + rest % ext[a];
        rest /= ext[a];
      }
      t[p * volume + i] = value_at(p, pos);
    }
  return t;
}

std::int64_t out_extent(const AxisWindow& w, std::int64_t in) {
  return w.transposed ? (in - 1) * w.stride - 2 * w.padding + w.extent : (in + 2 * w.padding - w.extent) / w.stride + 1;
}

struct Case {
  std::string name;
  std::vector<std::int64_t> extents;  // input
  AxisWindow window;                  // the same on every axis
  std::vector<int> grid_for_2, grid_for_4;
};

void run_case(const Case& k, bool interleave_progress) {
  const int ranks = world().size();
  const std::vector<int>& spatial = ranks == 2 ? k.grid_for_2 : k.grid_for_4;
  ASSERT_TRUE(ranks == 2 || ranks == 4) << "run with mpirun -np 2 or 4";
  ProcessGrid grid(world(), GridShape{1, spatial});
  const Window window(k.extents.size(), k.window);
  Partition in{k.extents, spatial, {}}, out{{}, spatial, {}};
  for (auto e : k.extents) out.extents.push_back(out_extent(k.window, e));
  const HaloPlan plan = make_halo_plan(window, in, out, grid.coords());
  auto backend = make_cpu_backend({1});
  HaloExchange exchange(*backend, grid.spatial(), plan, 7);

  const std::int64_t n = 2, c = 3;
  const Tensor owned = fill(n, c, plan.owned);
  Tensor local;
  exchange.start(owned);
  if (interleave_progress) exchange.test();  // what a layer does between interior pieces
  exchange.finish(owned, local);
  const Tensor expected = fill(n, c, plan.local);
  ASSERT_EQ(local.shape(), expected.shape()) << k.name;
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < local.numel(); ++i) wrong += local[i] != expected[i];
  EXPECT_EQ(wrong, 0) << k.name << ": rank " << world().rank() << " local box " << plan.local.to_string();

  // Reverse: each rank sends back its local values; an owned position gets value x (number of ranks
  // whose layer read it).
  const Tensor gradient = exchange.reverse(local);
  std::vector<int> readers(static_cast<std::size_t>(plan.owned.volume()), 0);
  for (int q = 0; q < grid.shape().spatial_ranks(); ++q) {
    const SpatialBox other =
        input_box_for(window, out.owned(grid_coords(grid.shape(), q)), in.whole()).intersect(plan.owned);
    if (other.empty()) continue;
    const auto ext = plan.owned.extents();
    for (std::int64_t i = 0; i < plan.owned.volume(); ++i) {
      std::int64_t rest = i;
      bool inside = true;
      for (std::size_t a = ext.size(); a-- > 0;) {
        const auto pos = plan.owned.axes[a].lo + rest % ext[a];
        rest /= ext[a];
        inside = inside && pos >= other.axes[a].lo && pos < other.axes[a].hi;
      }
      readers[static_cast<std::size_t>(i)] += inside;
    }
  }
  wrong = 0;
  const std::int64_t volume = plan.owned.volume();
  for (std::int64_t p = 0; p < n * c; ++p)
    for (std::int64_t i = 0; i < volume; ++i)
      wrong +=
          gradient[p * volume + i] != owned[p * volume + i] * static_cast<float>(readers[static_cast<std::size_t>(i)]);
  EXPECT_EQ(wrong, 0) << k.name << ": reverse halo on rank " << world().rank();
}

const AxisWindow kConv3{3, 1, 1, false}, kConv5Dilated{5, 1, 2, false}, kStride2{3, 2, 1, false},
    kStem7{7, 2, 3, false}, kUp2{2, 2, 0, true}, kPool3{3, 2, 1, false};

TEST(HaloExchangeMpi, Conv3x3x3FacesEdgesCorners) {
  run_case({"3d k3 even", {8, 6, 4}, kConv3, {2, 1, 1}, {2, 2, 1}}, false);
  run_case({"3d k3 uneven", {9, 7, 5}, kConv3, {1, 2, 1}, {1, 2, 2}}, true);
  run_case({"3d k3 along W", {4, 4, 9}, kConv3, {1, 1, 2}, {1, 1, 4}}, false);
}

TEST(HaloExchangeMpi, Conv2dAllNeighbours) {
  run_case({"2d k3", {9, 11}, kConv3, {2, 1}, {2, 2}}, true);
  run_case({"2d dilated k5", {10, 12}, kConv5Dilated, {1, 2}, {2, 2}}, false);
  run_case({"2d stem 7x7 s2", {21, 16}, kStem7, {2, 1}, {2, 2}}, false);
}

TEST(HaloExchangeMpi, StridedTransposedAndPoolingWindows) {
  run_case({"3d s2", {9, 8, 6}, kStride2, {2, 1, 1}, {2, 1, 2}}, false);
  run_case({"3d transposed k2 s2", {5, 4, 6}, kUp2, {2, 1, 1}, {2, 2, 1}}, true);
  run_case({"2d pool k3 s2 p1", {13, 10}, kPool3, {1, 2}, {2, 2}}, false);
}

}  // namespace
}  // namespace fanstore::trainer
