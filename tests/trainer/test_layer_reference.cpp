// Every layer's forward pass against the naive-loop reference (reference_ops), 2D and 3D.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "layer_harness.hpp"
#include "reference_ops.hpp"
#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/normalization.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"

namespace fanstore::trainer::testing {
namespace {

// Forward tolerance: |backend - reference| <= 1e-4 + 1e-4 * |reference| (float32 vs double loops).
constexpr double kAtol = 1e-4, kRtol = 1e-4;

Tensor param(LayerHarness& h, const std::string& name) {
  const auto i = h.table().find_parameter(name);
  EXPECT_GE(i, 0) << name;
  const auto& e = h.table().parameters()[static_cast<std::size_t>(i)];
  return Tensor::view(e.shape, h.table().values() + e.offset);
}

void expect_conv_matches(const Shape& in, const ConvolutionSpec& spec) {
  LayerHarness h(std::make_unique<Convolution>("conv", spec));
  Rng rng(1);
  Tensor x = random_tensor(in, rng);
  Tensor b = spec.bias ? param(h, "conv.bias") : Tensor();
  Tensor ref = reference::convolution(x, param(h, "conv.weight"), spec.bias ? &b : nullptr, spec);
  EXPECT_LE(tolerance_ratio(h.forward({x}), ref, kAtol, kRtol), 1.0);
}

TEST(LayerReference, Conv2d) { expect_conv_matches({2, 3, 9, 8}, convolution_spec(2, 3, 5, 3, 2, 1, true)); }
TEST(LayerReference, Conv2dDilated1x1AndNoBias) {
  expect_conv_matches({1, 4, 7, 7}, convolution_spec(2, 4, 3, 3, 1, 2, false, 2));
  expect_conv_matches({1, 4, 7, 7}, convolution_spec(2, 4, 6, 1, 2, 0, false));  // ResNet downsample: 7 -> 4
}
TEST(LayerReference, Conv2dStem7x7) { expect_conv_matches({1, 3, 16, 16}, convolution_spec(2, 3, 8, 7, 2, 3, false)); }
TEST(LayerReference, Conv3d) { expect_conv_matches({2, 2, 5, 6, 4}, convolution_spec(3, 2, 4, 3, 1, 1, true)); }
TEST(LayerReference, Conv3dStrided) { expect_conv_matches({1, 3, 6, 6, 6}, convolution_spec(3, 3, 4, 3, 2, 1, false)); }
TEST(LayerReference, ConvTranspose2d) {
  expect_conv_matches({2, 3, 4, 5}, convolution_spec(2, 3, 2, 3, 2, 1, true, 1, true));
}
TEST(LayerReference, ConvTranspose3dUNetUpsample) {
  expect_conv_matches({1, 4, 3, 3, 3}, convolution_spec(3, 4, 3, 2, 2, 0, true, 1, true));
}

// Per-side padding (what a spatial slab uses: padding only where it meets the global boundary).
ConvolutionSpec asymmetric(ConvolutionSpec spec, std::vector<std::int64_t> lo, std::vector<std::int64_t> hi) {
  spec.padding_lo = std::move(lo);
  spec.padding_hi = std::move(hi);
  return spec;
}
TEST(LayerReference, Conv2dAsymmetricPadding) {
  expect_conv_matches({2, 3, 7, 6}, asymmetric(convolution_spec(2, 3, 4, 3, 1, 0, true), {1, 0}, {0, 2}));
  expect_conv_matches({1, 2, 9, 8}, asymmetric(convolution_spec(2, 2, 3, 3, 2, 0, false, 2), {2, 0}, {1, 3}));
}
TEST(LayerReference, Conv3dAsymmetricPadding) {
  expect_conv_matches({1, 2, 5, 6, 4}, asymmetric(convolution_spec(3, 2, 3, 3, 1, 0, true), {1, 0, 2}, {0, 1, 0}));
  expect_conv_matches({1, 2, 6, 6, 6}, asymmetric(convolution_spec(3, 2, 3, 3, 2, 0, false), {0, 1, 1}, {1, 0, 0}));
}
TEST(LayerReference, ConvTransposeAsymmetricPadding) {
  expect_conv_matches({2, 3, 4, 5}, asymmetric(convolution_spec(2, 3, 2, 3, 2, 0, true, 1, true), {1, 0}, {0, 1}));
  expect_conv_matches({1, 2, 3, 3, 3},
                      asymmetric(convolution_spec(3, 2, 3, 3, 2, 0, true, 1, true), {0, 1, 2}, {1, 0, 1}));
}

void expect_pool_matches(const Shape& in, const PoolingSpec& spec) {
  LayerHarness h(std::make_unique<Pooling>("pool", spec));
  Rng rng(2);
  Tensor x = random_tensor(in, rng);
  EXPECT_LE(tolerance_ratio(h.forward({x}), reference::pooling(x, spec), kAtol, kRtol), 1.0);
  EXPECT_LE(tolerance_ratio(h.forward({x}, Mode::Eval), reference::pooling(x, spec), kAtol, kRtol), 1.0);
}

TEST(LayerReference, MaxPool2dPadded) { expect_pool_matches({2, 3, 9, 8}, pooling_spec(2, PoolingKind::Max, 3, 2, 1)); }
TEST(LayerReference, MaxPool3dOddSize) {
  expect_pool_matches({1, 2, 5, 4, 6}, pooling_spec(3, PoolingKind::Max, 2, 2));
}
TEST(LayerReference, AvgPool2dPaddedCountsPadding) {
  expect_pool_matches({2, 3, 7, 7}, pooling_spec(2, PoolingKind::Average, 3, 2, 1));
}
TEST(LayerReference, AvgPool3d) { expect_pool_matches({1, 2, 4, 4, 4}, pooling_spec(3, PoolingKind::Average, 2, 2)); }

PoolingSpec asymmetric(PoolingSpec spec, std::vector<std::int64_t> lo, std::vector<std::int64_t> hi) {
  spec.padding_lo = std::move(lo);
  spec.padding_hi = std::move(hi);
  return spec;
}
TEST(LayerReference, PoolingAsymmetricPadding) {
  expect_pool_matches({2, 3, 8, 7}, asymmetric(pooling_spec(2, PoolingKind::Max, 3, 2), {1, 0}, {0, 2}));
  expect_pool_matches({2, 3, 7, 7}, asymmetric(pooling_spec(2, PoolingKind::Average, 3, 2), {0, 1}, {2, 1}));
  expect_pool_matches({1, 2, 5, 4, 6}, asymmetric(pooling_spec(3, PoolingKind::Max, 2, 2), {1, 0, 0}, {0, 1, 1}));
  expect_pool_matches({1, 2, 4, 5, 4}, asymmetric(pooling_spec(3, PoolingKind::Average, 3, 1), {2, 0, 1}, {0, 1, 1}));
}
TEST(LayerReference, SpecsRefuseMismatchedPadding) {
  auto conv = convolution_spec(2, 3, 4, 3);
  conv.padding_hi = {1};
  EXPECT_THROW(Convolution("c", conv), std::invalid_argument);
  auto pool = pooling_spec(2, PoolingKind::Max, 2, 2);
  pool.padding_lo = {2, 0};  // a window of padding only
  EXPECT_THROW(Pooling("p", pool), std::invalid_argument);
}

TEST(LayerReference, GlobalAveragePooling) {
  for (Shape s : {Shape{2, 5, 3, 4}, Shape{2, 3, 2, 3, 4}}) {
    LayerHarness h(std::make_unique<GlobalAveragePooling>("gap"));
    Rng rng(3);
    Tensor x = random_tensor(s, rng);
    EXPECT_LE(tolerance_ratio(h.forward({x}), reference::global_average(x), kAtol, kRtol), 1.0);
  }
}

TEST(LayerReference, BatchNormTrainEvalAndRunningStats) {
  LayerHarness h(std::make_unique<BatchNorm>("bn", 3, 1e-5f, 0.1f));
  Rng rng(4);
  Tensor x = random_tensor({4, 3, 2, 3, 3}, rng, -2.f, 3.f);
  Tensor g = param(h, "bn.weight"), b = param(h, "bn.bias");
  EXPECT_LE(tolerance_ratio(h.forward({x}), reference::batch_norm(x, g, b, nullptr, nullptr, 1e-5), kAtol, kRtol), 1.0);

  // Running statistics after one step from (0, 1): 0.1 * batch mean, 0.9 + 0.1 * unbiased variance.
  const auto& mean_e = h.table().buffers()[static_cast<std::size_t>(h.table().find_buffer("bn.running_mean"))];
  const auto& var_e = h.table().buffers()[static_cast<std::size_t>(h.table().find_buffer("bn.running_var"))];
  Tensor running_mean = Tensor::view(mean_e.shape, h.table().buffer_values() + mean_e.offset);
  Tensor running_var = Tensor::view(var_e.shape, h.table().buffer_values() + var_e.offset);
  const std::int64_t inner = 18, count = 4 * inner;
  for (std::int64_t c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (std::int64_t n = 0; n < 4; ++n)
      for (std::int64_t i = 0; i < inner; ++i) m += x[(n * 3 + c) * inner + i];
    m /= count;
    for (std::int64_t n = 0; n < 4; ++n)
      for (std::int64_t i = 0; i < inner; ++i) v += std::pow(x[(n * 3 + c) * inner + i] - m, 2);
    v /= count - 1;
    EXPECT_NEAR(running_mean[c], 0.1 * m, 1e-5);
    EXPECT_NEAR(running_var[c], 0.9 + 0.1 * v, 1e-5);
  }
  EXPECT_LE(tolerance_ratio(h.forward({x}, Mode::Eval),
                            reference::batch_norm(x, g, b, &running_mean, &running_var, 1e-5), kAtol, kRtol),
            1.0);
}

TEST(LayerReference, InstanceNorm) {
  for (Shape s : {Shape{2, 3, 3, 4, 2}, Shape{2, 4, 5, 5}}) {
    LayerHarness h(std::make_unique<InstanceNorm>("in", s[1]));
    Rng rng(5);
    Tensor x = random_tensor(s, rng, -1.f, 2.f);
    Tensor ref = reference::instance_norm(x, param(h, "in.weight"), param(h, "in.bias"), 1e-5);
    EXPECT_LE(tolerance_ratio(h.forward({x}), ref, kAtol, kRtol), 1.0);
  }
}

TEST(LayerReference, Activations) {
  for (auto spec : {relu(), leaky_relu(0.3f), tanh_activation(), scale_by(1.2f)}) {
    LayerHarness h(std::make_unique<Activation>("act", spec));
    Rng rng(6);
    Tensor x = random_tensor({2, 3, 4, 5}, rng, -2.f, 2.f);
    EXPECT_LE(tolerance_ratio(h.forward({x}), reference::eltwise(x, spec), kAtol, kRtol), 1.0) << h.layer().kind();
  }
  // Backward reads the output: a negative slope would lose the input's sign, so it is refused by name.
  try {
    Activation("head.act", leaky_relu(-0.1f));
    FAIL() << "a negative LeakyReLU slope was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head.act: LeakyReLU needs a non-negative slope"), std::string::npos)
        << e.what();
  }
}

TEST(LayerReference, ActivationGradientGoesOverAMovedDyOnly) {
  // A caller that keeps dy gets it back untouched; one that moves it in gets dx in its storage, with
  // the same values (the models move every activation's dy: one activation-sized buffer less).
  const auto values = [](const Tensor& t) { return std::vector<float>(t.data(), t.data() + t.numel()); };
  for (auto spec : {relu(), leaky_relu(0.3f), tanh_activation(), scale_by(1.2f)}) {
    LayerHarness h(std::make_unique<Activation>("act", spec));
    Layer& layer = h.layer();
    Rng rng(7);
    const Tensor x = random_tensor({2, 3, 4, 5}, rng, -2.f, 2.f);
    const Tensor dy = random_tensor(x.shape(), rng);
    const Tensor dy_copy = h.backend().clone(dy);
    layer.forward({x}, Mode::Train);
    const Tensor kept_dx = h.backend().to_plain(layer.backward(dy).at(0));
    EXPECT_NE(kept_dx.raw(), dy.raw()) << layer.kind();
    EXPECT_EQ(values(dy), values(dy_copy)) << layer.kind() << ": the caller's dy changed";
    layer.forward({x}, Mode::Train);
    Tensor moved = h.backend().clone(dy);
    const void* storage = moved.raw();
    const Tensor moved_dx = layer.backward(std::move(moved)).at(0);
    EXPECT_EQ(moved_dx.raw(), storage) << layer.kind() << ": dx did not reuse the moved dy";
    EXPECT_EQ(values(h.backend().to_plain(moved_dx)), values(kept_dx)) << layer.kind();
  }
}

TEST(LayerReference, Linear) {
  LayerHarness h(std::make_unique<Linear>("fc", 9, 4));
  Rng rng(7);
  Tensor x = random_tensor({3, 9}, rng);
  Tensor b = param(h, "fc.bias");
  EXPECT_LE(tolerance_ratio(h.forward({x}), reference::linear(x, param(h, "fc.weight"), &b), kAtol, kRtol), 1.0);
}

TEST(LayerReference, AddConcatFlatten) {
  Rng rng(8);
  Tensor a = random_tensor({2, 2, 3, 3}, rng), b = random_tensor({2, 2, 3, 3}, rng),
         c = random_tensor({2, 3, 3, 3}, rng);
  LayerHarness add(std::make_unique<Add>("add"));
  Tensor sum = add.forward({a, b});
  for (std::int64_t i = 0; i < a.numel(); ++i) EXPECT_FLOAT_EQ(sum[i], a[i] + b[i]);
  LayerHarness cat(std::make_unique<Concat>("cat"));
  EXPECT_EQ(tolerance_ratio(cat.forward({a, c}), reference::concat_channels({a, c}), 0, 0), 0.0);
  LayerHarness flat(std::make_unique<Flatten>("flat"));
  Tensor f = flat.forward({c});
  EXPECT_EQ(f.shape(), (Shape{2, 27}));
  for (std::int64_t i = 0; i < c.numel(); ++i) EXPECT_EQ(f[i], c[i]);
}

TEST(LayerReference, DropoutKeepsExpectationAndIsIdentityInEval) {
  LayerHarness h(std::make_unique<Dropout>("drop", 0.25f, 3));
  Tensor x = Tensor::zeros({4, 5000});
  for (std::int64_t i = 0; i < x.numel(); ++i) x[i] = 1.f;
  Tensor y = h.forward({x});
  double zeros = 0, sum = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    zeros += y[i] == 0.f;
    sum += y[i];
    if (y[i] != 0.f) {
      EXPECT_FLOAT_EQ(y[i], 1.f / 0.75f);
    }
  }
  EXPECT_NEAR(zeros / static_cast<double>(y.numel()), 0.25, 0.02);
  EXPECT_NEAR(sum / static_cast<double>(y.numel()), 1.0, 0.03);
  Tensor e = h.forward({x}, Mode::Eval);
  for (std::int64_t i = 0; i < e.numel(); ++i) EXPECT_EQ(e[i], 1.f);
}

// The CPU backend hands native (possibly blocked) layouts from layer to layer: conv -> BN -> ReLU
// -> Add must not reorder in between (each output keeps the conv's layout).
TEST(LayerLayouts, NativeLayoutFlowsThroughConvBatchNormReluAdd) {
  auto backend = test_backend();
  ParameterTable table;
  Convolution conv("conv", convolution_spec(2, 16, 32, 3, 1, 1, false));
  BatchNorm bn("bn", 32);
  Activation act("relu", relu());
  Add add("add");
  for (Layer* l : std::initializer_list<Layer*>{&conv, &bn, &act, &add}) l->attach(*backend, table);
  table.finalize(*backend);
  Rng rng(9);
  conv.initialize(rng);
  bn.initialize(rng);
  Tensor x = random_tensor({2, 16, 8, 8}, rng);
  Tensor y = conv.forward({x}, Mode::Train);
  Tensor z = bn.forward({y}, Mode::Train);
  Tensor r = act.forward({z}, Mode::Train);
  Tensor s = add.forward({r, z}, Mode::Train);
  EXPECT_TRUE(z.same_layout(y));
  EXPECT_TRUE(r.same_layout(y));
  EXPECT_TRUE(s.same_layout(y));
  if (y.is_plain()) GTEST_SKIP() << "oneDNN chose the plain layout on this CPU; nothing to carry";
  std::cout << "conv output layout: " << y.layout()->describe() << "\n";
}

}  // namespace
}  // namespace fanstore::trainer::testing
