// Spatial plans of the three models: placements, the input box with its halo, and the one-line
// errors for grids that cannot work (a split finer than a layer's extent, a halo wider than a slab).
#include <gtest/gtest.h>

#include "trainer/distributed_plan.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"
#include "trainer/models.hpp"

namespace fanstore::trainer {
namespace {

std::unique_ptr<Model> model(const std::string& name, std::int64_t size, std::int64_t depth = 0) {
  ModelOptions o;
  o.batch = 1;
  o.input_size = size;
  o.input_depth = depth;
  o.classes = name == "resnet50" ? 10 : 0;
  return build_model(name, make_cpu_backend({1}), o);
}

std::string grid_error(const Model& m, const std::string& grid) {
  try {
    SpatialPlan(m, parse_grid(grid, m.input_shape().spatial_rank()));
  } catch (const GridError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    return e.what();
  }
  return "";
}

TEST(SpatialPlan, CosmoFlowSplitsUpToTheDenseHead) {
  auto m = model("cosmoflow", 64);
  const SpatialPlan plan(*m, parse_grid("1,2,2,1", 3));
  EXPECT_EQ(plan.output().placement, Placement::kReplicated);
  EXPECT_EQ(plan.node(0).partition.extents, (std::vector<std::int64_t>{64, 64, 64}));
  int split = 0, flat = 0, replicated = 0, windowed = 0;
  for (NodeId id = 1; id < plan.node_count(); ++id) {
    const auto& n = plan.node(id);
    split += n.placement == Placement::kSplit;
    flat += n.placement == Placement::kSplitFlat;
    replicated += n.placement == Placement::kReplicated;
    windowed += n.window.has_value();
  }
  EXPECT_EQ(split, 15);  // 5 x (conv, act, pool)
  EXPECT_EQ(flat, 1);
  EXPECT_EQ(windowed, 10);
  EXPECT_EQ(replicated, static_cast<int>(plan.node_count()) - 17);
  // Rank (0, 1, 0) owns D [0,32), H [32,64), W [0,64); the 3^3 convolution reads one more plane of D and H.
  EXPECT_EQ(plan.input_read_box({0, 1, 0}).to_string(), "[0,33)x[31,64)x[0,64)");
}

TEST(SpatialPlan, UNetStaysSplitToTheOutputAndResNetReplicatesAfterGlobalPooling) {
  auto unet = model("unet3d", 64, 32);
  EXPECT_EQ(SpatialPlan(*unet, parse_grid("1,1,2,2", 3)).output().placement, Placement::kSplit);
  auto resnet = model("resnet50", 64);
  const SpatialPlan plan(*resnet, parse_grid("1,2,2", 2));
  EXPECT_EQ(plan.output().placement, Placement::kReplicated);
  // The 7x7 stride-2 stem convolution with padding 3: rank (1, 0) owns rows [32,64) and reads from row 29.
  EXPECT_EQ(plan.input_read_box({1, 0}).to_string(), "[29,64)x[0,34)");
}

TEST(SpatialPlan, RejectsGridsThatCannotWorkWithOneLine) {
  auto cosmo32 = model("cosmoflow", 32);
  EXPECT_NE(grid_error(*cosmo32, "1,2,1,1").find("has D = 1, fewer positions than the 2 ranks splitting it"),
            std::string::npos)
      << grid_error(*cosmo32, "1,2,1,1");
  auto cosmo64 = model("cosmoflow", 64);
  EXPECT_EQ(grid_error(*cosmo64, "2,2,1,1"), "");
  EXPECT_NE(grid_error(*cosmo64, "1,1,1,4").find("conv_blocks.4"), std::string::npos);
  EXPECT_NE(grid_error(*cosmo64, "1,2,2").find("takes S,D,H,W"), std::string::npos);

  // A 7-wide window (halo 3) over slabs of 2 positions.
  Model wide("wide", make_cpu_backend({1}), Shape{1, 1, 8, 8});
  NodeId x = wide.add<Convolution>({wide.input()}, "conv7", convolution_spec(2, 1, 1, 7, 1, 3));
  wide.finalize(x);
  EXPECT_NE(grid_error(wide, "1,4,1").find("conv7: along H the halo is wider than a slab"), std::string::npos)
      << grid_error(wide, "1,4,1");
  EXPECT_EQ(grid_error(wide, "1,1,2"), "");
}

}  // namespace
}  // namespace fanstore::trainer
