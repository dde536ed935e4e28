// Host plans a device backend runs, checked on the CPU: the symmetric-padding plan (src/ops/
// padding_plan) a backend with one padding per dimension (cuDNN's legacy descriptors) uses for
// per-side padding, executed here with the CPU backend's symmetric primitives plus box copies and
// compared with its per-side primitives (forward and all gradients of convolution, transposed
// convolution and pooling); and the dims/strides cuDNN descriptors get (src/ops/strided_dims).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "../../trainer/src/ops/padding_plan.hpp"
#include "../../trainer/src/ops/strided_dims.hpp"
#include "layer_harness.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/pooling.hpp"

namespace fanstore::trainer::testing {
namespace {

constexpr double kAtol = 1e-5, kRtol = 1e-5;

ConvolutionSpec with_padding(ConvolutionSpec s, std::vector<std::int64_t> lo, std::vector<std::int64_t> hi) {
  s.padding_lo = std::move(lo);
  s.padding_hi = std::move(hi);
  return s;
}

// x grown by the plan's border, filled with `fill` around it.
Tensor bordered(Backend& be, const Tensor& x, const ops::SymmetricPadding& plan, float fill) {
  Tensor out = be.zeros(plan.bordered(x.shape()));
  be.fill(out, fill);
  be.copy_box(x, Box::whole(x.shape()), out, plan.interior(x.shape()), CopyMode::Overwrite);
  return out;
}

Tensor cropped(Backend& be, const Tensor& t, const Box& box) {
  Tensor out = be.zeros(Shape(box.extent));
  be.copy_box(be.to_plain(t), box, out, Box::whole(out.shape()), CopyMode::Overwrite);
  return out;
}

void expect_conv_plan_matches(const Shape& in, const ConvolutionSpec& spec) {
  auto be = test_backend();
  Rng rng(11);
  const auto plan = ops::plan_symmetric_padding(spec.padding_lo, spec.padding_hi);
  ASSERT_TRUE(plan.needs_border());
  Shape wshape{spec.transposed ? spec.in_channels : spec.out_channels,
               spec.transposed ? spec.out_channels : spec.in_channels};
  for (auto k : spec.kernel) wshape.dims.push_back(k);
  Tensor x = random_tensor(in, rng), w = random_tensor(wshape, rng), b = random_tensor({spec.out_channels}, rng);
  auto direct = be->make_convolution(spec);
  auto symmetric = be->make_convolution(ops::symmetric_spec(spec));
  Tensor y = be->to_plain(direct->forward(x, w, &b, Mode::Train));
  Tensor dy = random_tensor(y.shape(), rng);
  Tensor dx = be->to_plain(direct->backward_data(dy, w));
  Tensor dw = be->zeros(wshape), db = be->zeros({spec.out_channels});
  direct->backward_weights(x, dy, dw, &db);

  Tensor y2, dx2, dw2 = be->zeros(wshape), db2 = be->zeros({spec.out_channels});
  if (!spec.transposed) {
    // Border around the input; the gradient of the bordered input cropped back.
    Tensor xb = bordered(*be, x, plan, 0.f);
    y2 = be->to_plain(symmetric->forward(xb, w, &b, Mode::Train));
    dx2 = cropped(*be, symmetric->backward_data(dy, w), plan.interior(x.shape()));
    symmetric->backward_weights(xb, dy, dw2, &db2);
  } else {
    // The output cropped; its gradient zero-padded back to the uncropped shape.
    Tensor full = be->to_plain(symmetric->forward(x, w, &b, Mode::Train));
    ASSERT_EQ(full.shape(), plan.uncropped(y.shape()));
    y2 = cropped(*be, full, plan.crop(y.shape()));
    Tensor dy_full = bordered(*be, dy, plan, 0.f);
    dx2 = be->to_plain(symmetric->backward_data(dy_full, w));
    symmetric->backward_weights(x, dy_full, dw2, &db2);
  }
  EXPECT_LE(tolerance_ratio(y2, y, kAtol, kRtol), 1.0) << "forward";
  EXPECT_LE(tolerance_ratio(dx2, dx, kAtol, kRtol), 1.0) << "backward data";
  EXPECT_LE(tolerance_ratio(dw2, dw, kAtol, kRtol), 1.0) << "backward weights";
  EXPECT_LE(tolerance_ratio(db2, db, kAtol, kRtol), 1.0) << "backward bias";
}

TEST(PaddingPlan, SplitsPaddingIntoSymmetricPartAndBorder) {
  const auto p = ops::plan_symmetric_padding({2, 0, 1}, {1, 3, 1});
  EXPECT_EQ(p.symmetric, (std::vector<std::int64_t>{1, 0, 1}));
  EXPECT_EQ(p.extra_lo, (std::vector<std::int64_t>{1, 0, 0}));
  EXPECT_EQ(p.extra_hi, (std::vector<std::int64_t>{0, 3, 0}));
  EXPECT_EQ(p.bordered({2, 3, 4, 5, 6}), (Shape{2, 3, 5, 8, 6}));
  EXPECT_EQ(p.interior({2, 3, 4, 5, 6}).start, (std::vector<std::int64_t>{0, 0, 1, 0, 0}));
  EXPECT_FALSE(ops::plan_symmetric_padding({1, 1}, {1, 1}).needs_border());
}

TEST(PaddingPlan, ConvolutionWithBorderEqualsPerSidePadding) {
  expect_conv_plan_matches({2, 3, 7, 6}, with_padding(convolution_spec(2, 3, 4, 3, 1, 0, true), {1, 0}, {0, 2}));
  expect_conv_plan_matches({1, 2, 9, 8}, with_padding(convolution_spec(2, 2, 3, 3, 2, 0, true, 2), {2, 0}, {1, 3}));
  expect_conv_plan_matches({1, 2, 5, 6, 4},
                           with_padding(convolution_spec(3, 2, 3, 3, 1, 0, true), {1, 0, 2}, {0, 1, 0}));
}

TEST(PaddingPlan, TransposedConvolutionWithCropEqualsPerSidePadding) {
  expect_conv_plan_matches({2, 3, 4, 5},
                           with_padding(convolution_spec(2, 3, 2, 3, 2, 0, true, 1, true), {1, 0}, {0, 1}));
  expect_conv_plan_matches({1, 2, 3, 3, 3},
                           with_padding(convolution_spec(3, 2, 3, 3, 2, 0, true, 1, true), {0, 1, 2}, {1, 0, 1}));
}

TEST(PaddingPlan, PoolingWithBorderEqualsPerSidePadding) {
  auto be = test_backend();
  for (PoolingKind kind : {PoolingKind::Max, PoolingKind::Average}) {
    PoolingSpec spec = pooling_spec(2, kind, 3, 2);
    spec.padding_lo = {1, 0};
    spec.padding_hi = {0, 2};
    Rng rng(12);
    Tensor x = distinct_tensor({2, 3, 8, 7}, rng, 0.05f);
    const auto plan = ops::plan_symmetric_padding(spec.padding_lo, spec.padding_hi);
    auto direct = be->make_pooling(spec);
    auto symmetric = be->make_pooling(ops::symmetric_spec(spec));
    Tensor y = be->to_plain(direct->forward(x, Mode::Train));
    Tensor dy = random_tensor(y.shape(), rng);
    Tensor dx = be->to_plain(direct->backward(dy));
    // Max pooling's border is -inf (never the maximum); average pooling counts padding, so 0.
    const float fill = kind == PoolingKind::Max ? -std::numeric_limits<float>::infinity() : 0.f;
    Tensor y2 = be->to_plain(symmetric->forward(bordered(*be, x, plan, fill), Mode::Train));
    Tensor dx2 = cropped(*be, symmetric->backward(dy), plan.interior(x.shape()));
    EXPECT_LE(tolerance_ratio(y2, y, kAtol, kRtol), 1.0);
    EXPECT_LE(tolerance_ratio(dx2, dx, kAtol, kRtol), 1.0);
  }
}

// Strides must address element (n, c, s) where the layout kernels put it: plain (n, c, s),
// channels-last (n, s, c).
TEST(StridedDims, PlainAndChannelsLastAddressEveryElementLikeTheLayoutKernels) {
  for (const Shape& shape : {Shape{2, 3, 4}, Shape{2, 3, 4, 5}, Shape{2, 3, 2, 3, 4}}) {
    for (bool channels_last : {false, true}) {
      std::vector<int> dims, strides;
      ops::strided_dims(shape, channels_last, dims, strides);
      ASSERT_EQ(dims.size(), static_cast<std::size_t>(std::max(shape.rank(), 4)));
      const std::int64_t c = shape[1], s = shape.spatial_size();
      std::vector<bool> seen(static_cast<std::size_t>(shape.numel()), false);
      for (std::int64_t i = 0; i < shape.numel(); ++i) {
        // Plain linear index i -> multi-index -> strided offset.
        std::int64_t rest = i, offset = 0;
        for (int d = shape.rank() - 1; d >= 0; --d) {
          offset += (rest % shape[d]) * strides[static_cast<std::size_t>(d)];
          rest /= shape[d];
        }
        const std::int64_t sp = i % s, ch = (i / s) % c, n = i / (s * c);
        EXPECT_EQ(offset, channels_last ? (n * s + sp) * c + ch : i) << shape.to_string() << " element " << i;
        seen[static_cast<std::size_t>(offset)] = true;
      }
      for (bool b : seen) ASSERT_TRUE(b);  // a bijection onto the storage
    }
  }
  std::vector<int> dims, strides;
  ops::strided_dims({6, 5}, false, dims, strides);
  EXPECT_EQ(dims, (std::vector<int>{6, 5, 1, 1}));
  ops::strided_dims({2, 3, 4}, false, dims, strides);  // BatchNorm takes (N, C, L) on the CPU too
  EXPECT_EQ(dims, (std::vector<int>{2, 3, 4, 1}));
  EXPECT_THROW(ops::strided_dims({6}, false, dims, strides), std::invalid_argument);
  EXPECT_THROW(ops::strided_dims({1, 2, 3, 4, 5, 6}, false, dims, strides), std::invalid_argument);
  try {  // 2^31 elements: int strides would wrap
    ops::strided_dims({2, 16, 1 << 26}, true, dims, strides);
    ADD_FAILURE() << "no error for 2^31 elements";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("give a smaller --batch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fanstore::trainer::testing
