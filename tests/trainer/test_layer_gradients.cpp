// Finite-difference gradient checks for every layer, inputs and parameters, 2D and 3D.
#include <gtest/gtest.h>

#include "layer_harness.hpp"
#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/normalization.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"

namespace fanstore::trainer::testing {
namespace {

// Tolerance for all checks: |analytic - numeric| <= 2e-3 + 2e-2 * |numeric| (GradientCheck defaults),
// central differences with step 3e-3 in float32 and the loss summed in double.

template <class L, class... Args>
void check(std::vector<Shape> shapes, GradientCheck options, Args&&... args) {
  LayerHarness h(std::make_unique<L>(std::forward<Args>(args)...));
  Rng rng(7);
  std::vector<Tensor> inputs;
  for (const auto& s : shapes) inputs.push_back(random_tensor(s, rng, -1.f, 1.f, 0.02f));
  check_gradients(h, inputs, options);
}

TEST(LayerGradients, Conv2dStridePaddingBias) {
  check<Convolution>({{2, 3, 6, 6}}, {}, "conv", convolution_spec(2, 3, 4, 3, 2, 1, true));
}
TEST(LayerGradients, Conv2dDilationNoBias) {
  check<Convolution>({{1, 2, 7, 7}}, {}, "conv", convolution_spec(2, 2, 3, 3, 1, 2, false, /*dilation=*/2));
}
TEST(LayerGradients, Conv3d) {
  check<Convolution>({{1, 2, 5, 5, 5}}, {}, "conv", convolution_spec(3, 2, 3, 3, 1, 1, true));
}
TEST(LayerGradients, Conv3dStrided) {
  check<Convolution>({{2, 2, 4, 4, 4}}, {}, "conv", convolution_spec(3, 2, 3, 3, 2, 1, false));
}
TEST(LayerGradients, ConvTranspose2d) {
  check<Convolution>({{1, 3, 4, 4}}, {}, "up", convolution_spec(2, 3, 2, 3, 2, 1, true, 1, /*transposed=*/true));
}
TEST(LayerGradients, ConvTranspose3d) {
  check<Convolution>({{1, 4, 3, 3, 3}}, {}, "up", convolution_spec(3, 4, 3, 2, 2, 0, true, 1, true));
}
ConvolutionSpec asymmetric(ConvolutionSpec spec, std::vector<std::int64_t> lo, std::vector<std::int64_t> hi) {
  spec.padding_lo = std::move(lo);
  spec.padding_hi = std::move(hi);
  return spec;
}
TEST(LayerGradients, Conv2dAsymmetricPadding) {
  check<Convolution>({{2, 2, 6, 5}}, {}, "conv", asymmetric(convolution_spec(2, 2, 3, 3, 2, 0, true), {1, 0}, {0, 2}));
}
TEST(LayerGradients, Conv3dAsymmetricPadding) {
  check<Convolution>({{1, 2, 4, 4, 4}}, {}, "conv",
                     asymmetric(convolution_spec(3, 2, 2, 3, 1, 0, false), {1, 0, 2}, {0, 1, 0}));
}
TEST(LayerGradients, ConvTransposeAsymmetricPadding) {
  check<Convolution>({{1, 3, 3, 4}}, {}, "up",
                     asymmetric(convolution_spec(2, 3, 2, 3, 2, 0, true, 1, true), {1, 0}, {0, 1}));
}
TEST(LayerGradients, BatchNorm2dTrain) { check<BatchNorm>({{3, 4, 3, 3}}, {}, "bn", 4); }
TEST(LayerGradients, BatchNorm3dTrain) { check<BatchNorm>({{2, 3, 2, 3, 3}}, {}, "bn", 3); }
TEST(LayerGradients, InstanceNorm3d) { check<InstanceNorm>({{2, 3, 3, 3, 3}}, {}, "in", 3); }
TEST(LayerGradients, InstanceNorm2d) { check<InstanceNorm>({{2, 3, 4, 4}}, {}, "in", 3); }
TEST(LayerGradients, ReLU) { check<Activation>({{2, 3, 4, 4}}, {}, "relu", relu()); }
TEST(LayerGradients, LeakyReLU3d) { check<Activation>({{2, 3, 2, 3, 3}}, {}, "lrelu", leaky_relu(0.3f)); }
TEST(LayerGradients, Tanh) { check<Activation>({{4, 5}}, {}, "tanh", tanh_activation()); }
TEST(LayerGradients, Scale) { check<Activation>({{4, 5}}, {}, "scale", scale_by(1.2f)); }
TEST(LayerGradients, Linear) { check<Linear>({{3, 7}}, {}, "fc", 7, 5, true); }
TEST(LayerGradients, LinearNoBias) { check<Linear>({{2, 6}}, {}, "fc", 6, 3, false); }
TEST(LayerGradients, AvgPool2d) {
  check<Pooling>({{2, 2, 6, 6}}, {}, "pool", pooling_spec(2, PoolingKind::Average, 3, 2, 1));
}
TEST(LayerGradients, AvgPool3d) {
  check<Pooling>({{1, 2, 4, 4, 4}}, {}, "pool", pooling_spec(3, PoolingKind::Average, 2, 2));
}
TEST(LayerGradients, GlobalAvgPool2d) { check<GlobalAveragePooling>({{2, 3, 4, 5}}, {}, "gap"); }
TEST(LayerGradients, GlobalAvgPool3d) { check<GlobalAveragePooling>({{2, 3, 2, 3, 4}}, {}, "gap"); }
TEST(LayerGradients, Add) { check<Add>({{2, 3, 3, 3}, {2, 3, 3, 3}}, {}, "add"); }
TEST(LayerGradients, Concat) { check<Concat>({{2, 2, 3, 3, 3}, {2, 3, 3, 3, 3}}, {}, "cat"); }
TEST(LayerGradients, Flatten) { check<Flatten>({{2, 3, 2, 2}}, {}, "flat"); }

// Max pooling needs inputs without ties closer than the finite-difference step.
void check_max_pool(const Shape& shape, const PoolingSpec& spec) {
  LayerHarness h(std::make_unique<Pooling>("pool", spec));
  Rng rng(3);
  check_gradients(h, {distinct_tensor(shape, rng, 0.05f)});
}
TEST(LayerGradients, MaxPool2dPadded) { check_max_pool({2, 2, 6, 6}, pooling_spec(2, PoolingKind::Max, 3, 2, 1)); }
TEST(LayerGradients, MaxPool3d) { check_max_pool({1, 2, 4, 4, 4}, pooling_spec(3, PoolingKind::Max, 2, 2)); }
TEST(LayerGradients, PoolingAsymmetricPadding) {
  PoolingSpec max = pooling_spec(2, PoolingKind::Max, 3, 2);
  max.padding_lo = {1, 0};
  max.padding_hi = {0, 2};
  check_max_pool({2, 2, 6, 5}, max);
  PoolingSpec avg = pooling_spec(3, PoolingKind::Average, 2, 2);
  avg.padding_lo = {1, 0, 1};
  avg.padding_hi = {0, 1, 1};
  check<Pooling>({{1, 2, 3, 4, 3}}, {}, "pool", avg);
}

TEST(LayerGradients, DropoutSameMaskEveryForward) {
  auto layer = std::make_unique<Dropout>("drop", 0.4f, 11);
  Dropout* drop = layer.get();
  LayerHarness h(std::move(layer));
  GradientCheck o;
  o.before_forward = [drop] { drop->reseed(11); };
  Rng rng(5);
  check_gradients(h, {random_tensor({3, 8}, rng)}, o);
}

}  // namespace
}  // namespace fanstore::trainer::testing
