// Process grids without MPI: uneven splits, --grid parsing, window geometry, interior/boundary pieces
// and halo plans (what one rank sends is what its neighbour receives, and the pieces tile the slab).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "trainer/distributed_grid.hpp"
#include "trainer/distributed_halo.hpp"

namespace fanstore::trainer {
namespace {

TEST(SplitRange, UnevenSplitsDifferByAtMostOneAndTile) {
  for (std::int64_t extent : {1, 5, 7, 9, 16, 33})
    for (int parts = 1; parts <= std::min<std::int64_t>(extent, 5); ++parts) {
      std::int64_t next = 0, smallest = extent, largest = 0;
      for (int i = 0; i < parts; ++i) {
        const Range r = split_range(extent, parts, i);
        EXPECT_EQ(r.lo, next);
        next = r.hi;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
      }
      EXPECT_EQ(next, extent);
      EXPECT_LE(largest - smallest, 1);
    }
  EXPECT_EQ(split_range(9, 2, 0), (Range{0, 5}));
  EXPECT_EQ(split_range(9, 2, 1), (Range{5, 9}));
}

TEST(GridParse, AcceptsTheModelsFormAndRejectsOthersWithOneLine) {
  EXPECT_EQ(parse_grid("2,2,2,1", 3), (GridShape{2, {2, 2, 1}}));
  EXPECT_EQ(parse_grid("1,2,2", 2), (GridShape{1, {2, 2}}));
  EXPECT_EQ(parse_grid("2,2,2,1", 3).ranks(), 8);
  // The last two: more than 2^20 ranks in all, one of them 2^32 + 1, which an int product wraps to 1.
  for (const char* bad : {"2,2,2", "2,2,2,1,1", "", "1,0,2,1", "1,a,2,1", "1,2,2,", "1,-2,2,1", "1,2.5,2,1",
                          "1,2000000,1,1", "65536,65536,1,1", "3,43,281,947881"}) {
    try {
      parse_grid(bad, 3);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos);
      EXPECT_NE(what.find("S,D,H,W"), std::string::npos) << what;
    }
  }
  try {  // four numbers and a comma: not "4 numbers" (which reads as right)
    parse_grid("1,1,1,1,", 3);
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("it ends with a comma"), std::string::npos) << e.what();
  }
  try {
    check_grid_ranks(parse_grid("2,2,2,1", 3), 4);
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs 8 ranks (the product), but 4 were started"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_grid_ranks(parse_grid("1,2,2", 2), 4));
}

TEST(GridCoords, RowMajorRoundTrip) {
  const GridShape g{1, {2, 3, 2}};
  std::set<std::vector<int>> seen;
  for (int i = 0; i < g.spatial_ranks(); ++i) {
    const auto c = grid_coords(g, i);
    EXPECT_EQ(grid_spatial_index(g, c), i);
    seen.insert(c);
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(grid_coords(g, 1), (std::vector<int>{0, 0, 1}));
}

ConvolutionSpec conv(std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d = 1, bool transposed = false) {
  ConvolutionSpec c;
  c.in_channels = c.out_channels = 1;
  c.kernel = {k};
  c.stride = {s};
  c.padding_lo = c.padding_hi = {p};
  c.dilation = {d};
  c.transposed = transposed;
  return c;
}

// Output size of the serial layer along one axis (PyTorch formulas).
std::int64_t out_extent(const ConvolutionSpec& c, std::int64_t in) {
  const auto k = c.dilation[0] * (c.kernel[0] - 1) + 1;
  return c.transposed ? (in - 1) * c.stride[0] - 2 * c.padding_lo[0] + k
                      : (in + 2 * c.padding_lo[0] - k) / c.stride[0] + 1;
}

TEST(Window, ReadsMatchesTheDefinitionPositionByPosition) {
  // For every single output, the inputs it reads by brute force equal reads() clipped.
  for (const auto& c : {conv(3, 1, 1), conv(3, 2, 1), conv(7, 2, 3), conv(1, 2, 0), conv(3, 1, 2, 2),
                        conv(2, 2, 0, 1, true), conv(3, 2, 1, 1, true), conv(4, 2, 1, 1, true)}) {
    const AxisWindow w = window_of(c)[0];
    const std::int64_t in = 11, out = out_extent(c, in);
    for (std::int64_t o = 0; o < out; ++o) {
      std::int64_t lo = in, hi = 0;
      for (std::int64_t i = 0; i < in; ++i)
        for (std::int64_t j = 0; j < c.kernel[0]; ++j) {
          const bool hit = c.transposed ? i * c.stride[0] + j * c.dilation[0] - c.padding_lo[0] == o
                                        : o * c.stride[0] - c.padding_lo[0] + j * c.dilation[0] == i;
          if (hit) lo = std::min(lo, i), hi = std::max(hi, i + 1);
        }
      const Range r = w.reads({o, o + 1}).intersect({0, in});
      // A dilated window may skip its clipped first/last taps: then reads() is a (harmless) superset.
      if (c.dilation[0] == 1) {
        EXPECT_EQ(r, (Range{lo, hi})) << "k" << c.kernel[0] << " s" << c.stride[0] << " p" << c.padding_lo[0]
                                      << " output " << o;
      } else {
        EXPECT_TRUE(r.contains(Range{lo, hi})) << "output " << o;
      }
    }
  }
}

TEST(Window, PiecePaddingReproducesTheOutputSize) {
  for (const auto& c :
       {conv(3, 1, 1), conv(3, 2, 1), conv(7, 2, 3), conv(1, 2, 0), conv(3, 1, 2, 2), conv(2, 2, 0, 1, true)}) {
    const Window w = window_of(c);
    const std::int64_t in = 13, out = out_extent(c, in);
    for (int parts = 1; parts <= 3; ++parts)
      for (int k = 0; k < parts; ++k) {
        const SpatialBox o{{split_range(out, parts, k)}};
        const WindowPiece p = window_piece(w, o, SpatialBox{{{0, in}}});
        const auto n = p.in.axes[0].size(), s = c.stride[0], e = w[0].extent;
        const auto produced =
            c.transposed ? (n - 1) * s - p.pad_lo[0] - p.pad_hi[0] + e : (n + p.pad_lo[0] + p.pad_hi[0] - e) / s + 1;
        EXPECT_EQ(produced, o.axes[0].size());
      }
  }
}

TEST(Window, InteriorAndBoundaryPiecesTileTheOutput) {
  ConvolutionSpec c = conv(3, 1, 1);
  c.kernel = {3, 3, 3}, c.stride = {1, 1, 1}, c.padding_lo = c.padding_hi = {1, 1, 1}, c.dilation = {1, 1, 1};
  const Window w = window_of(c);
  const Partition part{{9, 8, 7}, {2, 2, 1}, {}};
  for (int i = 0; i < 4; ++i) {
    const auto coords = grid_coords(GridShape{1, {2, 2, 1}}, i);
    const SpatialBox owned = part.owned(coords);
    const auto pieces = window_pieces(w, owned, owned, part.whole(), true);
    std::int64_t volume = 0;
    for (const auto& p : pieces) {
      volume += p.out.volume();
      for (const auto& q : pieces)
        if (&p != &q) {
          EXPECT_TRUE(p.out.intersect(q.out).empty());
        }
      EXPECT_TRUE(owned.contains(p.out));
    }
    EXPECT_EQ(volume, owned.volume());
    EXPECT_TRUE(owned.contains(pieces[0].in)) << "the interior needs no halo";
    EXPECT_EQ(pieces.size(), 3u) << "one boundary slice on the split side of D and of H";
  }
}

TEST(HaloPlan, WhatOneRankSendsIsWhatItsNeighbourReceives) {
  ConvolutionSpec c = conv(3, 1, 1);
  c.kernel = {3, 3, 3}, c.stride = {1, 1, 1}, c.padding_lo = c.padding_hi = {1, 1, 1}, c.dilation = {1, 1, 1};
  for (const GridShape& g : {GridShape{1, {2, 2, 2}}, GridShape{1, {3, 1, 2}}, GridShape{1, {1, 4, 1}}}) {
    const Partition part{{9, 8, 7}, g.spatial, {}};
    std::map<std::pair<int, int>, SpatialBox> sent, received;
    std::int64_t corner_pieces = 0;
    for (int i = 0; i < g.spatial_ranks(); ++i) {
      const HaloPlan plan = make_halo_plan(window_of(c), part, part, grid_coords(g, i));
      std::int64_t covered = plan.owned.intersect(plan.local).volume();
      for (const auto& r : plan.receive) {
        received[{r.peer, i}] = r.box;
        covered += r.box.volume();
        int thin = 0;
        for (const auto& a : r.box.axes) thin += a.size() == 1;
        corner_pieces += thin == 3;
      }
      for (const auto& s : plan.send) sent[{i, s.peer}] = s.box;
      EXPECT_EQ(covered, plan.local.volume()) << "halos + own part cover what the layer reads";
    }
    EXPECT_EQ(sent, received);
    if (g.spatial == std::vector<int>{2, 2, 2}) {
      EXPECT_EQ(corner_pieces, 8) << "each rank gets one corner";
    }
  }
}

TEST(HaloPlan, ASplitCoarserThanTheGridExchangesWithinEachCopy) {
  ConvolutionSpec c = conv(3, 1, 1);
  c.kernel = {3, 3}, c.stride = {1, 1}, c.padding_lo = c.padding_hi = {1, 1}, c.dilation = {1, 1};
  // 2 parts along H on a 4 x 2 grid: ranks (0|1, w) hold part 0, (2|3, w) part 1; W unsplit on 2 ranks.
  const GridShape g{1, {4, 2}};
  const Partition part{{8, 6}, {2, 1}, {4, 2}};
  std::map<std::pair<int, int>, SpatialBox> sent, received;
  for (int i = 0; i < g.spatial_ranks(); ++i) {
    const auto coords = grid_coords(g, i);
    const HaloPlan plan = make_halo_plan(window_of(c), part, part, coords);
    EXPECT_EQ(plan.owned, part.owned(coords));
    ASSERT_EQ(plan.receive.size(), 1u);
    // The neighbouring part's replica with the same offset: H coordinate 0 <-> 2 and 1 <-> 3.
    const auto peer = grid_coords(g, plan.receive[0].peer);
    EXPECT_EQ(peer[0], (coords[0] + 2) % 4);
    EXPECT_EQ(peer[1], coords[1]);
    received[{plan.receive[0].peer, i}] = plan.receive[0].box;
    for (const auto& s : plan.send) sent[{i, s.peer}] = s.box;
  }
  EXPECT_EQ(sent, received);
  EXPECT_TRUE(part.first_replica({0, 0}));
  EXPECT_FALSE(part.first_replica({1, 0}));
  EXPECT_FALSE(part.first_replica({2, 1}));
  EXPECT_EQ(part.replicas(), 4);
}

TEST(Redistribution, EveryRankGetsItsNewPartOnceAndFromOneHolder) {
  // Uneven extents, splits finer and coarser than each other (2 -> 4 parts of 7 do not nest), both
  // directions, 1D and 2D grids.
  struct Case {
    GridShape grid;
    Partition from, to;
  };
  const std::vector<Case> cases{
      {{1, {4}}, {{7}, {2}, {4}}, {{7}, {4}, {4}}},
      {{1, {4}}, {{6}, {4}, {4}}, {{6}, {2}, {4}}},
      {{1, {4}}, {{5}, {4}, {4}}, {{5}, {1}, {4}}},
      {{1, {2, 3}}, {{5, 9}, {2, 1}, {2, 3}}, {{5, 9}, {1, 3}, {2, 3}}},
      {{1, {2, 2, 2}}, {{3, 4, 2}, {2, 2, 2}, {2, 2, 2}}, {{3, 4, 2}, {1, 2, 1}, {2, 2, 2}}},
  };
  for (const auto& c : cases) {
    std::map<std::pair<int, int>, SpatialBox> sent, received;
    for (int i = 0; i < c.grid.spatial_ranks(); ++i) {
      const auto coords = grid_coords(c.grid, i);
      const HaloPlan plan = make_redistribution_plan(c.from, c.to, coords);
      EXPECT_EQ(plan.owned, c.from.owned(coords));
      EXPECT_EQ(plan.local, c.to.owned(coords));
      std::int64_t covered = plan.owned.intersect(plan.local).volume();
      for (const auto& r : plan.receive) {
        EXPECT_NE(r.peer, i);
        EXPECT_TRUE(c.from.owned(grid_coords(c.grid, r.peer)).contains(r.box)) << "the sender holds what it sends";
        EXPECT_TRUE(plan.owned.intersect(r.box).empty()) << "nothing received that this rank holds";
        covered += r.box.volume();
        received[{r.peer, i}] = r.box;
      }
      for (const auto& s : plan.send) sent[{i, s.peer}] = s.box;
      EXPECT_EQ(covered, plan.local.volume()) << "own part + receipts tile the new part";
    }
    EXPECT_EQ(sent, received);
  }
}

TEST(HaloPlan, AHaloWiderThanASlabIsNamed) {
  // A 7-wide window (halo 3) over slabs of 2.
  const Partition part{{8}, {4}, {}};
  const std::string problem = halo_width_problem(window_of(conv(7, 1, 3)), part, part);
  EXPECT_NE(problem.find("halo is wider than a slab"), std::string::npos) << problem;
  EXPECT_THROW(make_halo_plan(window_of(conv(7, 1, 3)), part, part, {1}), std::invalid_argument);
  EXPECT_EQ(halo_width_problem(window_of(conv(3, 1, 1)), part, part), "");
}

}  // namespace
}  // namespace fanstore::trainer
