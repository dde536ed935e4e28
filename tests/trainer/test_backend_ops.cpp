// The backend ops that are not layer kernels, on the CPU backend against naive loops: box copies,
// dropout masks (and their spatial-split invariance), normalisation statistics, add/concat, the
// element-wise ops, device checks, and the parameter table's arenas.
#include <cmath>
#include <cstring>
#include <numeric>

#include <gtest/gtest.h>

#include "layer_harness.hpp"
#include "reference_ops.hpp"

namespace fanstore::trainer::testing {
namespace {

// Row-major linear index of a multi-index.
std::int64_t linear(const Shape& s, const std::vector<std::int64_t>& idx) {
  std::int64_t at = 0;
  for (int d = 0; d < s.rank(); ++d) at = at * s[d] + idx[static_cast<std::size_t>(d)];
  return at;
}

// The naive box copy: visit every element of the box by its multi-index.
void naive_copy_box(const Tensor& src, const Box& sb, Tensor& dst, const Box& db, CopyMode mode) {
  const int r = src.shape().rank();
  std::vector<std::int64_t> i(static_cast<std::size_t>(r), 0);
  if (sb.numel() == 0) return;
  while (true) {
    std::vector<std::int64_t> a(i), b(i);
    for (int d = 0; d < r; ++d) {
      a[static_cast<std::size_t>(d)] += sb.start[static_cast<std::size_t>(d)];
      b[static_cast<std::size_t>(d)] += db.start[static_cast<std::size_t>(d)];
    }
    const float v = src[linear(src.shape(), a)];
    float& out = dst[linear(dst.shape(), b)];
    out = mode == CopyMode::Overwrite ? v : out + v;
    int d = r - 1;
    for (; d >= 0; --d) {
      if (++i[static_cast<std::size_t>(d)] < sb.extent[static_cast<std::size_t>(d)]) break;
      i[static_cast<std::size_t>(d)] = 0;
    }
    if (d < 0) return;
  }
}

Box box(std::vector<std::int64_t> start, std::vector<std::int64_t> extent) {
  return Box{std::move(start), std::move(extent)};
}

TEST(BackendOps, CopyBoxMatchesNaiveLoopsBothModes) {
  auto be = test_backend();
  Rng rng(1);
  struct Case {
    Shape src, dst;
    Box sb, db;
  };
  const std::vector<Case> cases = {
      // A D-face of a 5D slab into a contiguous halo buffer, and a buffer back into a halo region.
      {{2, 3, 6, 5, 4}, {2, 3, 1, 5, 4}, box({0, 0, 5, 0, 0}, {2, 3, 1, 5, 4}), box({0, 0, 0, 0, 0}, {2, 3, 1, 5, 4})},
      {{2, 3, 1, 5, 4}, {2, 3, 8, 5, 4}, box({0, 0, 0, 0, 0}, {2, 3, 1, 5, 4}), box({0, 0, 7, 0, 0}, {2, 3, 1, 5, 4})},
      // A W-face (strided on both sides), an H-face of a 4D tensor, a corner box between two tensors.
      {{2, 3, 6, 5, 4}, {2, 3, 6, 5, 2}, box({0, 0, 0, 0, 2}, {2, 3, 6, 5, 2}), box({0, 0, 0, 0, 0}, {2, 3, 6, 5, 2})},
      {{3, 4, 7, 5}, {3, 4, 2, 5}, box({0, 0, 5, 0}, {3, 4, 2, 5}), box({0, 0, 0, 0}, {3, 4, 2, 5})},
      {{2, 4, 5, 6, 7}, {3, 5, 6, 7, 8}, box({1, 1, 2, 3, 4}, {1, 2, 3, 2, 3}), box({2, 0, 1, 4, 5}, {1, 2, 3, 2, 3})},
      // The whole tensor (merges to one contiguous run) and an empty box.
      {{2, 3, 4}, {2, 3, 4}, box({0, 0, 0}, {2, 3, 4}), box({0, 0, 0}, {2, 3, 4})},
      {{2, 3, 4}, {2, 3, 4}, box({0, 1, 0}, {2, 0, 4}), box({0, 1, 0}, {2, 0, 4})},
  };
  for (const auto& c : cases)
    for (CopyMode mode : {CopyMode::Overwrite, CopyMode::Accumulate}) {
      Tensor src = random_tensor(c.src, rng), dst = random_tensor(c.dst, rng);
      Tensor expected = dst.clone();
      naive_copy_box(src, c.sb, expected, c.db, mode);
      be->copy_box(src, c.sb, dst, c.db, mode);
      for (std::int64_t i = 0; i < dst.numel(); ++i)
        ASSERT_EQ(dst[i], expected[i]) << c.sb.to_string() << " -> " << c.db.to_string() << " element " << i;
    }
}

TEST(BackendOps, CopyBoxRefusesBadBoxesWithTheOpName) {
  auto be = test_backend();
  Tensor a = Tensor::zeros({2, 3, 4}), b = Tensor::zeros({2, 3, 4});
  auto expect_error = [&](const Box& sb, const Box& db, const char* text) {
    try {
      be->copy_box(a, sb, b, db, CopyMode::Overwrite);
      FAIL() << "no error for " << sb.to_string() << " -> " << db.to_string();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("copy_box"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_error(box({0, 0, 1}, {2, 3, 4}), box({0, 0, 0}, {2, 3, 4}), "outside");
  expect_error(box({0, 0}, {2, 3}), box({0, 0, 0}, {2, 3, 4}), "one entry per dimension");
  expect_error(box({0, 0, 0}, {2, 3, 2}), box({0, 0, 0}, {2, 3, 3}), "differ in extent");
  // A tensor on another device is refused before any memory is touched.
  float fake = 0;
  Tensor device = Tensor::view({1}, &fake, Device::Cuda);
  EXPECT_THROW(be->copy_box(device, Box::whole({1}), b, box({0, 0, 0}, {1, 1, 1}), CopyMode::Overwrite),
               std::invalid_argument);
}

// The halo round trip a spatial layer does: pack faces, exchange (here: swap), unpack; the reverse
// halo accumulates the neighbour's halo gradient into the owner's boundary cells.
TEST(BackendOps, HaloFacesRoundTripAndReverseHaloAccumulates) {
  auto be = test_backend();
  Rng rng(2);
  const Shape slab{1, 2, 4, 3, 3}, halo_slab{1, 2, 6, 3, 3};  // D split, halo 1 on each side
  Tensor left = random_tensor(slab, rng), right = random_tensor(slab, rng);
  Tensor left_h = be->zeros(halo_slab), right_h = be->zeros(halo_slab);
  const Box interior = box({0, 0, 1, 0, 0}, {1, 2, 4, 3, 3});
  be->copy_box(left, Box::whole(slab), left_h, interior, CopyMode::Overwrite);
  be->copy_box(right, Box::whole(slab), right_h, interior, CopyMode::Overwrite);
  const Shape face{1, 2, 1, 3, 3};
  Tensor buffer = be->zeros(face);
  // left's last interior plane -> right's low halo plane.
  be->copy_box(left_h, box({0, 0, 4, 0, 0}, {1, 2, 1, 3, 3}), buffer, Box::whole(face), CopyMode::Overwrite);
  be->copy_box(buffer, Box::whole(face), right_h, box({0, 0, 0, 0, 0}, {1, 2, 1, 3, 3}), CopyMode::Overwrite);
  for (std::int64_t c = 0; c < 2; ++c)
    for (std::int64_t i = 0; i < 9; ++i) EXPECT_EQ(right_h[(c * 6 + 0) * 9 + i], left[(c * 4 + 3) * 9 + i]);
  // Reverse: right's halo gradient (here: its halo values) added onto left's boundary plane.
  Tensor before = left_h.clone();
  be->copy_box(right_h, box({0, 0, 0, 0, 0}, {1, 2, 1, 3, 3}), buffer, Box::whole(face), CopyMode::Overwrite);
  be->copy_box(buffer, Box::whole(face), left_h, box({0, 0, 4, 0, 0}, {1, 2, 1, 3, 3}), CopyMode::Accumulate);
  for (std::int64_t c = 0; c < 2; ++c)
    for (std::int64_t i = 0; i < 9; ++i)
      EXPECT_EQ(left_h[(c * 6 + 4) * 9 + i], before[(c * 6 + 4) * 9 + i] + left[(c * 4 + 3) * 9 + i]);
}

TEST(BackendOps, DropoutMaskIsDeterministicWithTheRightRateAndScale) {
  auto be = test_backend();
  Tensor x = Tensor::zeros({4, 5000});
  be->fill(x, 1.f);
  const DropoutMask m{0.3f, 77, 5, {}};
  Tensor y = be->dropout(x, m), y2 = be->dropout(x, m);
  double zeros = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    ASSERT_EQ(y[i], y2[i]);
    zeros += y[i] == 0.f;
    if (y[i] != 0.f) {
      ASSERT_FLOAT_EQ(y[i], 1.f / 0.7f);
    }
  }
  EXPECT_NEAR(zeros / static_cast<double>(y.numel()), 0.3, 0.015);
  // Another step or seed draws another mask.
  Tensor other = be->dropout(x, DropoutMask{0.3f, 77, 6, {}});
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) differ += (y[i] == 0.f) != (other[i] == 0.f);
  EXPECT_GT(differ, y.numel() / 5);
}

// A spatially split run must draw exactly the serial run's mask: each slab, told where it sits,
// gets the matching part of the whole tensor's mask, whatever the split.
TEST(BackendOps, DropoutOnSlabsEqualsTheSerialMask) {
  auto be = test_backend();
  Rng rng(3);
  const Shape global{2, 3, 6, 4, 5};
  Tensor x = random_tensor(global, rng);
  const DropoutMask whole{0.5f, 1234, 9, {}};
  Tensor serial = be->dropout(x, whole);
  for (int dim : {2, 3, 4}) {
    const std::int64_t half = global[dim] / 2;
    for (std::int64_t begin : {std::int64_t{0}, half}) {
      Box b = Box::whole(global);
      b.start[static_cast<std::size_t>(dim)] = begin;
      b.extent[static_cast<std::size_t>(dim)] = begin == 0 ? half : global[dim] - half;
      Shape local(b.extent);
      Tensor slab = be->zeros(local), expected = be->zeros(local);
      be->copy_box(x, b, slab, Box::whole(local), CopyMode::Overwrite);
      be->copy_box(serial, b, expected, Box::whole(local), CopyMode::Overwrite);
      DropoutMask m = whole;
      m.placement = GlobalPlacement{global, b.start};
      Tensor y = be->dropout(slab, m);
      for (std::int64_t i = 0; i < y.numel(); ++i)
        ASSERT_EQ(y[i], expected[i]) << "dim " << dim << " slab at " << begin;
    }
  }
  DropoutMask bad = whole;
  bad.placement = GlobalPlacement{global, {0, 0, 4, 0, 0}};
  EXPECT_THROW(be->dropout(x, bad), std::invalid_argument);  // a whole-size slab at offset 4 sticks out
}

TEST(BackendOps, NormalisationOpsMatchReferencesAndSplitSums) {
  auto be = test_backend();
  Rng rng(4);
  const Shape s{2, 3, 4, 5};
  Tensor x = random_tensor(s, rng, -1.f, 2.f), gamma = random_tensor({3}, rng, 0.5f, 1.5f),
         beta = random_tensor({3}, rng);
  // Instance norm: per (n, c) statistics.
  Tensor sums = be->norm_sums(x, NormGroups::PerSampleChannel);
  EXPECT_EQ(sums.shape(), (Shape{6, 2}));
  Tensor y = be->norm_apply(x, sums, 20, gamma, beta, 1e-5f, NormGroups::PerSampleChannel);
  EXPECT_LE(tolerance_ratio(y, reference::instance_norm(x, gamma, beta, 1e-5), 1e-5, 1e-5), 1.0);
  // Batch norm with batch statistics: per channel over (n, spatial).
  Tensor bsums = be->norm_sums(x, NormGroups::PerChannel);
  Tensor yb = be->norm_apply(x, bsums, 40, gamma, beta, 1e-5f, NormGroups::PerChannel);
  EXPECT_LE(tolerance_ratio(yb, reference::batch_norm(x, gamma, beta, nullptr, nullptr, 1e-5), 1e-5, 1e-5), 1.0);
  // Split along H: the sums of the two halves add up to the whole's, and normalising a half with
  // the global sums gives that half of the whole result (what a spatial layer relies on).
  for (NormGroups g : {NormGroups::PerSampleChannel, NormGroups::PerChannel}) {
    Tensor whole = be->norm_sums(x, g);
    const double count = g == NormGroups::PerChannel ? 40 : 20;
    Tensor full = be->norm_apply(x, whole, count, gamma, beta, 1e-5f, g);
    std::vector<double> added(static_cast<std::size_t>(2 * whole.shape()[0]), 0.0);
    for (std::int64_t h0 : {0, 2}) {
      Box b = box({0, 0, h0, 0}, {2, 3, 2, 5});
      Tensor half = be->zeros({2, 3, 2, 5});
      be->copy_box(x, b, half, Box::whole(half.shape()), CopyMode::Overwrite);
      Tensor part = be->norm_sums(half, g);
      for (std::size_t i = 0; i < added.size(); ++i) added[i] += static_cast<const double*>(part.raw())[i];
      Tensor yh = be->norm_apply(half, whole, count, gamma, beta, 1e-5f, g);
      Tensor expected = be->zeros(half.shape());
      be->copy_box(full, b, expected, Box::whole(half.shape()), CopyMode::Overwrite);
      EXPECT_EQ(tolerance_ratio(yh, expected, 0, 0), 0.0);
    }
    for (std::size_t i = 0; i < added.size(); ++i)
      EXPECT_NEAR(added[i], static_cast<const double*>(whole.raw())[i], 1e-12 * (1 + std::fabs(added[i])));
  }
}

// Backward of the normalisation ops against central differences of norm_apply in double.
TEST(BackendOps, NormalisationBackwardMatchesFiniteDifferences) {
  auto be = test_backend();
  for (NormGroups g : {NormGroups::PerSampleChannel, NormGroups::PerChannel}) {
    Rng rng(5);
    const Shape s{2, 3, 3, 3};
    Tensor x = random_tensor(s, rng, -1.f, 2.f), gamma = random_tensor({3}, rng, 0.5f, 1.5f);
    Tensor beta = random_tensor({3}, rng), r = random_tensor(s, rng);
    const double count = g == NormGroups::PerChannel ? 18 : 9;
    auto loss = [&]() {
      Tensor y = be->norm_apply(x, be->norm_sums(x, g), count, gamma, beta, 1e-5f, g);
      double l = 0;
      for (std::int64_t i = 0; i < y.numel(); ++i) l += static_cast<double>(y[i]) * r[i];
      return l;
    };
    Tensor sums = be->norm_sums(x, g);
    Tensor bsums = be->norm_backward_sums(r, x, sums, count, 1e-5f, g);
    Tensor dgamma = be->zeros({3}), dbeta = be->zeros({3});
    Tensor dx = be->norm_backward_apply(r, x, sums, bsums, count, gamma, 1e-5f, g, dgamma, dbeta);
    auto probe = [&](float* v, double analytic) {
      const float saved = *v;
      *v = saved + 1e-2f;
      const double plus = loss();
      *v = saved - 1e-2f;
      const double minus = loss();
      *v = saved;
      const double numeric = (plus - minus) / (static_cast<double>(saved + 1e-2f) - (saved - 1e-2f));
      EXPECT_NEAR(analytic, numeric, 2e-3 + 1e-2 * std::fabs(numeric));
    };
    for (std::int64_t i = 0; i < x.numel(); i += 5) probe(x.data() + i, dx[i]);
    for (std::int64_t c = 0; c < 3; ++c) {
      probe(gamma.data() + c, dgamma[c]);
      probe(beta.data() + c, dbeta[c]);
    }
  }
}

TEST(BackendOps, AddConcatSplitAndElementwise) {
  auto be = test_backend();
  Rng rng(6);
  Tensor a = random_tensor({2, 2, 3, 3}, rng), b = random_tensor({2, 2, 3, 3}, rng),
         c = random_tensor({2, 3, 3, 3}, rng);
  Tensor s = be->add({a, b, a});
  for (std::int64_t i = 0; i < a.numel(); ++i) EXPECT_FLOAT_EQ(s[i], a[i] + b[i] + a[i]);
  Tensor cat = be->concat_channels({a, c});
  EXPECT_EQ(tolerance_ratio(cat, reference::concat_channels({a, c}), 0, 0), 0.0);
  auto parts = be->split_channels(cat, {2, 3});
  EXPECT_EQ(tolerance_ratio(parts[0], a, 0, 0), 0.0);
  EXPECT_EQ(tolerance_ratio(parts[1], c, 0, 0), 0.0);
  EXPECT_THROW(be->split_channels(cat, {2, 2}), std::invalid_argument);
  Tensor y = b.clone();
  be->axpby(2.f, a, -1.f, y);
  for (std::int64_t i = 0; i < a.numel(); ++i) EXPECT_FLOAT_EQ(y[i], 2 * a[i] - b[i]);
  EXPECT_TRUE(be->all_finite(y));
  y[5] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(be->all_finite(y));
  y[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(be->all_finite(y));
  be->scale(a, 0.f);
  EXPECT_EQ(a[3], 0.f);
}

TEST(BackendOps, MemoryCopiesAndDeviceChecks) {
  auto be = test_backend();
  EXPECT_EQ(be->device(), Device::Host);
  Tensor t = be->zeros({3, 4}, DType::F64);
  EXPECT_EQ(t.bytes(), 96u);
  EXPECT_THROW(t.data(), std::logic_error);  // F32 accessor on an F64 tensor
  Tensor f = be->zeros({3, 4});
  be->fill(f, 2.5f);
  Tensor g = be->clone(f);
  EXPECT_EQ(g[11], 2.5f);
  EXPECT_NE(g.raw(), f.raw());
  EXPECT_EQ(be->to_host(f).raw(), f.raw());  // already plain host memory: no copy
  float fake[4] = {};
  Tensor on_gpu = Tensor::view({4}, fake, Device::Cuda);
  try {
    be->axpby(1.f, on_gpu, 0.f, on_gpu);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("axpby"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
  Tensor sliced = f.slice(4, {2, 2});
  EXPECT_EQ(sliced.raw(), static_cast<char*>(f.raw()) + 16);
  EXPECT_THROW(f.slice(10, {2, 2}), std::out_of_range);
}

TEST(ParameterArenas, CommitReadWriteAndOneAllocationEach) {
  auto be = test_backend();
  ParameterTable t;
  auto w = t.declare_parameter("w", {2, 3});
  t.declare_buffer("r", {2});
  t.finalize(*be);
  EXPECT_TRUE(t.committed());  // host backend: the staging arenas are the final ones
  t.value(w)[4] = 7.f;
  EXPECT_EQ(t.read(Arena::Values)[4], 7.f);
  t.write(Arena::Buffers, {1.f, 2.f});
  EXPECT_EQ(t.buffer_values()[1], 2.f);
  EXPECT_THROW(t.write(Arena::Buffers, {1.f}), std::invalid_argument);
  // Views share the arena's single allocation.
  EXPECT_EQ(t.value(w).storage(), t.arena(Arena::Values).storage());
  EXPECT_EQ(t.gradient(w).storage(), t.arena(Arena::Gradients).storage());
}

}  // namespace
}  // namespace fanstore::trainer::testing
