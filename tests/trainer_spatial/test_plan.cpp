// Spatial plans of the three models: placements, the input box with its halo, and the one-line
// errors for grids that cannot work (a split finer than a layer's extent, a halo wider than a slab).
#include <gtest/gtest.h>

#include <set>

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

TEST(SpatialPlan, SplitsEachLayerAsFinelyAsItCan) {
  // 32^3 on 1,2,2,1: the blocks split D and H in two down to 2^3; the last pooling's output (1^3)
  // cannot be split, so it runs on one part (replicated over the 4 ranks), its input redistributed.
  auto cosmo32 = model("cosmoflow", 32);
  const SpatialPlan plan(*cosmo32, parse_grid("1,2,2,1", 3));
  int coarse = 0, moved = 0;
  for (NodeId id = 1; id < plan.node_count(); ++id) {
    const auto& n = plan.node(id);
    if (n.placement != Placement::kSplit) continue;
    const std::string name = cosmo32->node_layer(id)->name();
    const bool last_pool = name == "conv_blocks.4.pool";
    EXPECT_EQ(n.partition.parts, (last_pool ? std::vector<int>{1, 1, 1} : std::vector<int>{2, 2, 1})) << name;
    coarse += n.partition.replicas() > 1;
    moved += plan.redistributes(id, 0);
  }
  EXPECT_EQ(coarse, 1);
  EXPECT_EQ(moved, 1);
  const std::string text = plan.describe(*cosmo32);
  EXPECT_NE(text.find("conv_blocks.4.pool (MaxPool3d, (1, 512, 1, 1, 1)): split 1,1,1 x 4; input 0 redistributed "
                      "from 2,2,1"),
            std::string::npos)
      << text;
  // U-Net 32x64x64 on 4 ranks along D: D = 2 on 2 parts, D = 1 on one, and the decoder split again.
  auto unet = model("unet3d", 64, 32);
  const SpatialPlan u(*unet, parse_grid("1,4,1,1", 3));
  std::set<int> d_parts;
  for (NodeId id = 1; id < u.node_count(); ++id)
    if (u.node(id).placement == Placement::kSplit) d_parts.insert(u.node(id).partition.parts[0]);
  EXPECT_EQ(d_parts, (std::set<int>{1, 2, 4}));
  EXPECT_EQ(u.output().partition.parts, (std::vector<int>{4, 1, 1}));
}

TEST(SpatialPlan, RejectsPlansThatCannotWorkWithOneLine) {
  auto cosmo64 = model("cosmoflow", 64);
  EXPECT_EQ(grid_error(*cosmo64, "2,2,1,1"), "");
  EXPECT_EQ(grid_error(*cosmo64, "1,1,1,4"), "") << "the last block runs on 2 parts of 2 ranks";
  EXPECT_NE(grid_error(*cosmo64, "1,2,2").find("takes S,D,H,W"), std::string::npos);

  // A 7-wide window (halo 3) over slabs of 2 positions: split in 2 along H instead of 4.
  Model wide("wide", make_cpu_backend({1}), Shape{1, 1, 8, 8});
  NodeId x = wide.add<Convolution>({wide.input()}, "conv7", convolution_spec(2, 1, 1, 7, 1, 3));
  wide.finalize(x);
  EXPECT_EQ(SpatialPlan(wide, parse_grid("1,4,1", 2)).node(x).partition.parts, (std::vector<int>{2, 1}));

  auto forced = [](const Model& m, const std::string& grid, const std::string& splits) -> std::string {
    try {
      const int r = m.input_shape().spatial_rank();
      SpatialPlan(m, parse_grid(grid, r), parse_layer_splits(splits, r));
    } catch (const GridError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return e.what();
    }
    return "";
  };
  EXPECT_NE(forced(wide, "1,4,1", "conv7=4,1")
                .find("conv7 (Conv2d, output (1, 1, 8, 8)): along H the halo is wider "
                      "than a slab"),
            std::string::npos)
      << forced(wide, "1,4,1", "conv7=4,1");
  EXPECT_EQ(forced(wide, "1,4,1", "conv7=1,1"), "");
  auto cosmo32 = model("cosmoflow", 32);
  const std::string small = forced(*cosmo32, "1,2,2,1", "conv_blocks.4.pool=2,1,1");
  EXPECT_NE(small.find("--layer-split conv_blocks.4.pool=2,1,1: conv_blocks.4.pool (MaxPool3d, output (1, 512, 1, 1, "
                       "1)) has D = 1, fewer positions than the 2 parts splitting it: use fewer parts along D"),
            std::string::npos)
      << small;
  EXPECT_NE(forced(*cosmo32, "1,2,2,1", "conv_blocks.0.conv=3,1,1").find("do not divide the grid's 2 ranks"),
            std::string::npos);
  EXPECT_NE(forced(*cosmo32, "1,2,2,1", "nosuch=1,1,1").find("has no layer of that name"), std::string::npos);
  EXPECT_NE(forced(*cosmo32, "1,2,2,1", "fc1=1,1,1").find("is not spatially split"), std::string::npos)
      << forced(*cosmo32, "1,2,2,1", "fc1=1,1,1");
  EXPECT_THROW(parse_layer_splits("conv=1,1", 3), GridError);
  EXPECT_THROW(parse_layer_splits("conv=1,x,1", 3), GridError);
  EXPECT_THROW(parse_layer_splits("=1,1,1", 3), GridError);
  EXPECT_EQ(parse_layer_splits("a=1,2,1;b=2,2,2", 3).at("b"), (std::vector<int>{2, 2, 2}));
  EXPECT_NE(forced(*cosmo32, "1,2,2,1", "input=1,1,1").find("the input is no layer"), std::string::npos);
}

// What --layer-split says for each malformed argument: one line that quotes it and names the fault.
TEST(SpatialPlan, LayerSplitParsingNamesTheFault) {
  auto message = [](const std::string& text) -> std::string {
    try {
      parse_layer_splits(text, 3);
    } catch (const GridError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return e.what();
    }
    return "";
  };
  // A layer named twice was taken with the last split winning.
  EXPECT_EQ(message("a=1,1,1;a=2,1,1"),
            "--layer-split \"a=1,1,1;a=2,1,1\": \"a\" is given twice; give each layer one split");
  EXPECT_NE(message(" a = 1,1,1 ; a=2,1,1").find("\"a\" is given twice"), std::string::npos);
  EXPECT_NE(message(";;").find("--layer-split \";;\": entry 1 is empty"), std::string::npos) << message(";;");
  EXPECT_NE(message("a=1,1,1;;b=1,1,1").find("entry 2 is empty"), std::string::npos);
  EXPECT_NE(message("a=1,1,1;").find("it ends with ';'"), std::string::npos);
  EXPECT_NE(message("a=99999999999,1,1").find("\"99999999999\" is out of range"), std::string::npos)
      << message("a=99999999999,1,1");
  EXPECT_NE(message("a=0,1,1").find("\"0\" is not a positive number"), std::string::npos);
  // Spaces around names and counts are dropped.
  const LayerSplits spaced = parse_layer_splits(" conv_blocks.0.conv = 2,1,1 ; b=1,1,1 ", 3);
  EXPECT_EQ(spaced.at("conv_blocks.0.conv"), (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(spaced.at("b"), (std::vector<int>{1, 1, 1}));
}

}  // namespace
}  // namespace fanstore::trainer
