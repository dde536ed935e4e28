// Every layer type split over 2 and 4 ranks (even and uneven splits, every axis) against the serial
// layer: output, input gradient and parameter gradients within 1e-5 of the serial maximum.
#include <gtest/gtest.h>

#include "exactness.hpp"
#include "spatial_testing.hpp"
#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/normalization.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"

namespace fanstore::trainer {
namespace {

using testing::world;

using Builder = std::function<std::unique_ptr<Model>(std::int64_t)>;

// The grids a case runs on: 2 ranks or 4 ranks, spatial only unless a case asks for sample groups.
std::vector<GridShape> grids(int rank, bool with_samples = false) {
  std::vector<GridShape> out;
  if (world().size() == 2) {
    if (rank == 3) out = {{1, {2, 1, 1}}, {1, {1, 2, 1}}, {1, {1, 1, 2}}};
    else out = {{1, {2, 1}}, {1, {1, 2}}};
  } else {
    if (rank == 3) out = {{1, {2, 2, 1}}, {1, {1, 2, 2}}, {1, {4, 1, 1}}, {1, {2, 1, 2}}};
    else out = {{1, {2, 2}}, {1, {4, 1}}, {1, {1, 4}}};
    if (with_samples) out.push_back(rank == 3 ? GridShape{2, {1, 2, 1}} : GridShape{2, {1, 2}});
  }
  return out;
}

// Raw errors within 1e-5 of the serial maximum on every grid of this world size.
void expect_exact(const std::string& what, const Builder& build, std::int64_t batch, int rank,
                  bool with_samples = false, DistributedOptions options = {}) {
  testing::expect_exact(what, build, batch, grids(rank, with_samples), options);
}

// A model of one input and a chain of layers added by `body`.
Builder chain(const Shape& input, const std::function<NodeId(Model&, NodeId)>& body) {
  return [input, body](std::int64_t batch) {
    Shape s = input;
    s[0] = batch;
    auto m = std::make_unique<Model>("case", make_cpu_backend({1}), s);
    m->finalize(body(*m, m->input()), 7);
    return m;
  };
}

ConvolutionSpec spec3(std::int64_t cin, std::int64_t cout, std::int64_t k, std::int64_t s, std::int64_t p,
                      std::int64_t d = 1, bool transposed = false, int rank = 3) {
  return convolution_spec(rank, cin, cout, k, s, p, true, d, transposed);
}

// In front of a normalisation a bias has no effect (its gradient is zero in exact arithmetic, so only
// rounding noise is left to compare); the models leave it out there too.
ConvolutionSpec no_bias(ConvolutionSpec s) {
  s.bias = false;
  return s;
}

TEST(SplitLayers, Convolution3dUnevenSlabs) {
  expect_exact(
      "conv3d k3 p1 (9x7x5)",
      chain({2, 3, 9, 7, 5}, [](Model& m, NodeId x) { return m.add<Convolution>({x}, "conv", spec3(3, 4, 3, 1, 1)); }),
      2, 3);
}

TEST(SplitLayers, Convolution3dStrideAndDilation) {
  expect_exact(
      "conv3d k3 s2 p1 (11x8x9)",
      chain({1, 2, 11, 8, 9}, [](Model& m, NodeId x) { return m.add<Convolution>({x}, "conv", spec3(2, 3, 3, 2, 1)); }),
      1, 3);
  expect_exact("conv3d k3 d2 p2 (10x9x8)",
               chain({1, 2, 10, 9, 8},
                     [](Model& m, NodeId x) { return m.add<Convolution>({x}, "conv", spec3(2, 3, 3, 1, 2, 2)); }),
               1, 3);
}

TEST(SplitLayers, Convolution2dStemAndDilation) {
  expect_exact(
      "conv2d 7x7 s2 p3 (21x18)",
      chain({2, 3, 21, 18},
            [](Model& m, NodeId x) { return m.add<Convolution>({x}, "conv", spec3(3, 4, 7, 2, 3, 1, false, 2)); }),
      2, 2);
  expect_exact(
      "conv2d k3 d2 p2 (13x12)",
      chain({2, 3, 13, 12},
            [](Model& m, NodeId x) { return m.add<Convolution>({x}, "conv", spec3(3, 2, 3, 1, 2, 2, false, 2)); }),
      2, 2);
}

TEST(SplitLayers, TransposedConvolutionAfterAConvolution) {
  // The conv makes the transposed conv's input a split activation (not the loaded input).
  expect_exact("conv + convT k2 s2 (6x5x7)",
               chain({1, 2, 6, 5, 7},
                     [](Model& m, NodeId x) {
                       x = m.add<Convolution>({x}, "conv", spec3(2, 3, 3, 1, 1));
                       return m.add<Convolution>({x}, "up", spec3(3, 2, 2, 2, 0, 1, true));
                     }),
               1, 3);
}

TEST(SplitLayers, PoolingAcrossSlabEdges) {
  expect_exact("conv + maxpool3d k2 s2 (9x8x7)",
               chain({1, 2, 9, 8, 7},
                     [](Model& m, NodeId x) {
                       x = m.add<Convolution>({x}, "conv", spec3(2, 3, 3, 1, 1));
                       return m.add<Pooling>({x}, "pool", pooling_spec(3, PoolingKind::Max, 2, 2));
                     }),
               1, 3);
  expect_exact("conv + maxpool2d k3 s2 p1 (15x13)",
               chain({2, 2, 15, 13},
                     [](Model& m, NodeId x) {
                       x = m.add<Convolution>({x}, "conv", spec3(2, 3, 3, 1, 1, 1, false, 2));
                       return m.add<Pooling>({x}, "pool", pooling_spec(2, PoolingKind::Max, 3, 2, 1));
                     }),
               2, 2);
  expect_exact("conv + avgpool2d k3 s1 p1 (9x10)",
               chain({2, 2, 9, 10},
                     [](Model& m, NodeId x) {
                       x = m.add<Convolution>({x}, "conv", spec3(2, 3, 3, 1, 1, 1, false, 2));
                       return m.add<Pooling>({x}, "pool", pooling_spec(2, PoolingKind::Average, 3, 1, 1));
                     }),
               2, 2);
}

TEST(SplitLayers, BatchNormOverTheSpatialGroupAndWithSyncBn) {
  const auto bn = chain({2, 3, 8, 7, 6}, [](Model& m, NodeId x) {
    x = m.add<Convolution>({x}, "conv", no_bias(spec3(3, 4, 3, 1, 1)));
    x = m.add<BatchNorm>({x}, "bn", 4);
    return m.add<Activation>({x}, "relu", relu());
  });
  expect_exact("conv + bn3d + relu", bn, 2, 3);
  DistributedOptions sync;
  sync.sync_bn = true;
  expect_exact("conv + bn3d + relu, --sync-bn", bn, 1, 3, /*with_samples=*/true, sync);
  expect_exact("conv + bn2d",
               chain({2, 3, 10, 9},
                     [](Model& m, NodeId x) {
                       x = m.add<Convolution>({x}, "conv", no_bias(spec3(3, 4, 3, 1, 1, 1, false, 2)));
                       return m.add<BatchNorm>({x}, "bn", 4);
                     }),
               2, 2);
}

TEST(SplitLayers, InstanceNorm) {
  expect_exact("conv + instancenorm3d",
               chain({2, 2, 8, 7, 6},
                     [](Model& m, NodeId x) {
                       x = m.add<Convolution>({x}, "conv", no_bias(spec3(2, 3, 3, 1, 1)));
                       return m.add<InstanceNorm>({x}, "in", 3);
                     }),
               2, 3, /*with_samples=*/true);
}

TEST(SplitLayers, GlobalPoolingAndDenseHead) {
  expect_exact("conv + gap + flatten + linear",
               chain({2, 3, 9, 8},
                     [](Model& m, NodeId x) {
                       x = m.add<Convolution>({x}, "conv", spec3(3, 4, 3, 1, 1, 1, false, 2));
                       x = m.add<GlobalAveragePooling>({x}, "gap");
                       x = m.add<Flatten>({x}, "flatten");
                       return m.add<Linear>({x}, "fc", 4, 5);
                     }),
               2, 2, /*with_samples=*/true);
  expect_exact("conv + flatten + linear + leaky + dropout + linear",
               chain({2, 2, 6, 5, 4},
                     [](Model& m, NodeId x) {
                       x = m.add<Convolution>({x}, "conv", spec3(2, 3, 3, 1, 1));
                       x = m.add<Flatten>({x}, "flatten");
                       x = m.add<Linear>({x}, "fc1", 3 * 6 * 5 * 4, 8);
                       x = m.add<Activation>({x}, "act", leaky_relu(0.3f));
                       x = m.add<Dropout>({x}, "drop", 0.25f, 11);
                       return m.add<Linear>({x}, "fc2", 8, 3);
                     }),
               2, 3, /*with_samples=*/true);
}

TEST(SplitLayers, DropoutOnSlabsDrawsTheSerialMask) {
  expect_exact("conv + dropout + conv",
               chain({2, 2, 7, 6, 5},
                     [](Model& m, NodeId x) {
                       x = m.add<Convolution>({x}, "conv1", spec3(2, 3, 3, 1, 1));
                       x = m.add<Dropout>({x}, "drop", 0.3f, 5);
                       return m.add<Convolution>({x}, "conv2", spec3(3, 2, 3, 1, 1));
                     }),
               2, 3);
}

TEST(SplitLayers, ConcatSkipAndResidualAdd) {
  expect_exact("concat skip (U-Net)",
               chain({1, 2, 8, 6, 6},
                     [](Model& m, NodeId x) {
                       const NodeId skip = m.add<Convolution>({x}, "conv0", spec3(2, 3, 3, 1, 1));
                       NodeId down = m.add<Convolution>({skip}, "down", spec3(3, 4, 3, 2, 1));
                       NodeId up = m.add<Convolution>({down}, "up", spec3(4, 3, 2, 2, 0, 1, true));
                       NodeId cat = m.add<Concat>({up, skip}, "cat");
                       return m.add<Convolution>({cat}, "conv1", spec3(6, 2, 3, 1, 1));
                     }),
               1, 3);
  expect_exact("residual add (ResNet)",
               chain({2, 3, 10, 9},
                     [](Model& m, NodeId x) {
                       const NodeId a = m.add<Convolution>({x}, "conv_a", spec3(3, 4, 3, 1, 1, 1, false, 2));
                       const NodeId b = m.add<Convolution>({x}, "conv_b", spec3(3, 4, 1, 1, 0, 1, false, 2));
                       const NodeId sum = m.add<Add>({a, b}, "add");
                       return m.add<Activation>({sum}, "relu", relu());
                     }),
               2, 2);
}

}  // namespace
}  // namespace fanstore::trainer
