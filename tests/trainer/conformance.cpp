// One conformance suite for every backend: `trainer_conformance --backend cpu|cuda [--precision
// fp32|bf16|fp16]` runs every op and every model forward/backward on the backend under test and
// holds it to (a) the naive double-precision references of reference_ops, (b) the adjoint identity
// <op(x), r> = <x, op'(r)> of the linear ops, which checks a backward pass without any reference,
// and (c) for a backend other than the CPU, the CPU backend's results, with the tolerances below.
// Without a CUDA device the CUDA runs exit 77 saying "no CUDA device" (ctest: SKIP).
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory_resource>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "layer_harness.hpp"
#include "reference_ops.hpp"
#include "trainer/device_selection.hpp"
#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/losses.hpp"
#include "trainer/models.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer::testing {
namespace {

struct Conformance {
  std::shared_ptr<Backend> under_test;  // the backend held to the references
  std::shared_ptr<Backend> cpu;         // the CPU backend (reference (c)); the same object when testing the CPU
  Precision precision = Precision::FP32;
  bool is_cpu() const { return under_test.get() == cpu.get(); }
  // |a - b| <= rtol * (|b| + max|b| / 10) elementwise: relative, with a floor at a tenth of the
  // tensor's largest magnitude so values that cancel to near zero are not held to 1e-4 of
  // themselves. fp32 1e-4; half types store activations with 8 (bf16) or 11 (fp16) bits of mantissa
  // and accumulate in fp32: 3e-2 and 5e-3.
  double rtol() const { return precision == Precision::FP32 ? 1e-4 : precision == Precision::BF16 ? 3e-2 : 5e-3; }
};
Conformance& env() {
  static Conformance c;
  return c;
}

Backend& be() { return *env().under_test; }
// A copy on the backend (on the CPU, to_device would hand back the very host tensor: no aliasing here).
Tensor up(const Tensor& host) { return be().to_device(host.clone()); }
// Back on the host as plain F32 (cast on the device first: to_host keeps the type).
Tensor down(const Tensor& t) { return be().to_host(be().cast(be().to_plain(t), DType::F32)); }

double max_abs(const Tensor& t) {
  double m = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(t[i])));
  return m;
}

// Largest |a - b| / (rtol * (|b| + max|b| / 10)); <= 1 passes.
double error_ratio(const Tensor& a, const Tensor& b, double rtol) {
  EXPECT_EQ(a.shape(), b.shape());
  const double floor = max_abs(b) / 10 + 1e-30;
  double worst = 0;
  for (std::int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / (rtol * (std::fabs(b[i]) + floor)));
  return worst;
}

#define EXPECT_CLOSE(a, b, what) EXPECT_LE(error_ratio((a), (b), env().rtol()), 1.0) << (what)

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}
double abs_dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += std::fabs(static_cast<double>(a[i]) * b[i]);
  return s;
}

// <f(x), r> == <x, f'(r)> for a linear f, relative to the sum of the magnitudes of the products.
void expect_adjoint(const Tensor& y, const Tensor& r, const Tensor& x, const Tensor& dx, const std::string& what) {
  const double lhs = dot(y, r), rhs = dot(x, dx), scale = abs_dot(y, r) + abs_dot(x, dx) + 1e-30;
  EXPECT_LE(std::fabs(lhs - rhs) / scale, 10 * env().rtol()) << what << ": <y, r> " << lhs << " vs <x, dx> " << rhs;
}

// The same kernel on the CPU backend (reference (c)); null when testing the CPU itself.
template <class Make>
auto cpu_kernel(Make make) -> decltype(make(*env().cpu)) {
  if (env().is_cpu()) return nullptr;
  return make(*env().cpu);
}

// ---- convolution ----

ConvolutionSpec per_side(ConvolutionSpec s, std::vector<std::int64_t> lo, std::vector<std::int64_t> hi) {
  s.padding_lo = std::move(lo);
  s.padding_hi = std::move(hi);
  return s;
}

void check_convolution(const Shape& in, const ConvolutionSpec& spec) {
  const std::string what = std::string(spec.transposed ? "transposed " : "") + "conv " + in.to_string();
  Rng rng(17);
  Shape ws{spec.transposed ? spec.in_channels : spec.out_channels,
           spec.transposed ? spec.out_channels : spec.in_channels};
  for (auto k : spec.kernel) ws.dims.push_back(k);
  Tensor x = random_tensor(in, rng), w = random_tensor(ws, rng, -0.5f, 0.5f),
         b = random_tensor({spec.out_channels}, rng);
  auto k = be().make_convolution(spec);
  Tensor dev_b = up(b);
  const Tensor y_dev = k->forward(up(x), up(w), spec.bias ? &dev_b : nullptr, Mode::Train);
  const Tensor y = down(y_dev);
  EXPECT_CLOSE(y, reference::convolution(x, w, spec.bias ? &b : nullptr, spec), what + " forward vs naive loops");
  Tensor r = random_tensor(y.shape(), rng);
  Tensor dw_dev = be().zeros(ws), db_dev = be().zeros({spec.out_channels});
  k->backward_weights(up(x), up(r), dw_dev, spec.bias ? &db_dev : nullptr);
  const Tensor dx = down(k->backward_data(up(r), up(w))), dw = down(dw_dev), db = down(db_dev);
  // y is linear in x and in w (without the bias): both backward passes are its adjoints.
  const Tensor y0 = reference::convolution(x, w, nullptr, spec);
  expect_adjoint(y0, r, x, dx, what + " backward data");
  expect_adjoint(y0, r, w, dw, what + " backward weights");
  if (spec.bias) {
    Tensor expected = Tensor::zeros({spec.out_channels});
    const std::int64_t inner = r.shape().spatial_size();
    for (std::int64_t i = 0; i < r.numel(); ++i) expected[(i / inner) % spec.out_channels] += r[i];
    EXPECT_CLOSE(db, expected, what + " bias gradient");
  }
  if (auto ck = cpu_kernel([&](Backend& c) { return c.make_convolution(spec); })) {
    ck->forward(x, w, spec.bias ? &b : nullptr, Mode::Train);
    Tensor cdw = Tensor::zeros(ws), cdb = Tensor::zeros({spec.out_channels});
    ck->backward_weights(x, r, cdw, spec.bias ? &cdb : nullptr);
    EXPECT_CLOSE(dx, env().cpu->to_plain(ck->backward_data(r, w)), what + " backward data vs CPU");
    EXPECT_CLOSE(dw, cdw, what + " backward weights vs CPU");
  }
}

TEST(Conformance, Convolution2d) {
  check_convolution({2, 3, 9, 8}, convolution_spec(2, 3, 5, 3, 1, 1, true));
  check_convolution({2, 3, 9, 8}, convolution_spec(2, 3, 4, 3, 2, 1, false));    // strided
  check_convolution({1, 4, 9, 9}, convolution_spec(2, 4, 3, 3, 1, 2, true, 2));  // dilated
  check_convolution({1, 4, 7, 7}, convolution_spec(2, 4, 8, 1, 2, 0, false));    // ResNet downsample
  check_convolution({1, 3, 16, 16}, convolution_spec(2, 3, 8, 7, 2, 3, false));  // ResNet stem
}
TEST(Conformance, Convolution3d) {
  check_convolution({2, 2, 5, 6, 4}, convolution_spec(3, 2, 4, 3, 1, 1, true));
  check_convolution({1, 3, 6, 6, 6}, convolution_spec(3, 3, 4, 3, 2, 1, false));
}
TEST(Conformance, TransposedConvolution) {
  check_convolution({2, 3, 4, 5}, convolution_spec(2, 3, 2, 3, 2, 1, true, 1, true));
  check_convolution({1, 4, 3, 3, 3}, convolution_spec(3, 4, 3, 2, 2, 0, true, 1, true));  // U-Net upsampling
}
TEST(Conformance, ConvolutionPaddingPerSide) {
  check_convolution({2, 3, 7, 6}, per_side(convolution_spec(2, 3, 4, 3, 1, 0, true), {1, 0}, {0, 2}));
  check_convolution({1, 2, 5, 6, 4}, per_side(convolution_spec(3, 2, 3, 3, 1, 0, true), {1, 0, 2}, {0, 1, 0}));
  check_convolution({2, 3, 4, 5}, per_side(convolution_spec(2, 3, 2, 3, 2, 0, true, 1, true), {1, 0}, {0, 1}));
}

// ---- pooling ----

void check_pooling(const Shape& in, PoolingSpec spec) {
  const std::string what = std::string(spec.kind == PoolingKind::Max ? "max" : "avg") + " pool " + in.to_string();
  Rng rng(18);
  Tensor x = distinct_tensor(in, rng, 0.05f);  // no ties: max pooling's gradient is defined
  auto k = be().make_pooling(spec);
  const Tensor y = down(k->forward(up(x), Mode::Train));
  EXPECT_CLOSE(y, reference::pooling(x, spec), what + " forward vs naive loops");
  Tensor r = random_tensor(y.shape(), rng);
  const Tensor dx = down(k->backward(up(r)));
  expect_adjoint(y, r, x, dx, what + " backward");  // linear at a fixed argmax
  EXPECT_CLOSE(down(k->forward(up(x), Mode::Eval)), y, what + " eval forward");
  // A training forward whose backward never came (a rolled-back step), then inference: a backward is refused.
  // (What the CPU max-pool then no longer holds, oneDNN's argmax workspace, is not a tensor `Storage` counts.)
  k->forward(up(x), Mode::Train);
  k->forward(up(x), Mode::Eval);
  EXPECT_THROW(k->backward(up(r)), std::logic_error) << what;
  if (auto ck = cpu_kernel([&](Backend& c) { return c.make_pooling(spec); })) {
    ck->forward(x, Mode::Train);
    EXPECT_CLOSE(dx, env().cpu->to_plain(ck->backward(r)), what + " backward vs CPU");
  }
}

TEST(Conformance, Pooling) {
  check_pooling({2, 3, 9, 8}, pooling_spec(2, PoolingKind::Max, 3, 2, 1));
  check_pooling({2, 3, 7, 7}, pooling_spec(2, PoolingKind::Average, 3, 2, 1));
  check_pooling({1, 2, 5, 4, 6}, pooling_spec(3, PoolingKind::Max, 2, 2));
  check_pooling({1, 2, 4, 4, 4}, pooling_spec(3, PoolingKind::Average, 2, 2));
  PoolingSpec asym = pooling_spec(2, PoolingKind::Max, 3, 2);
  asym.padding_lo = {1, 0};
  asym.padding_hi = {0, 2};
  check_pooling({2, 3, 8, 7}, asym);
  asym.kind = PoolingKind::Average;
  check_pooling({2, 3, 8, 7}, asym);
}

// ---- batch norm, activations, inner product ----

TEST(Conformance, BatchNorm) {
  for (Shape s : {Shape{4, 3, 5, 5}, Shape{2, 3, 2, 3, 3}, Shape{6, 5}}) {
    const std::string what = "batch norm " + s.to_string();
    Rng rng(19);
    Tensor x = random_tensor(s, rng, -2.f, 3.f), g = random_tensor({s[1]}, rng, 0.5f, 1.5f),
           bt = random_tensor({s[1]}, rng);
    auto k = be().make_batch_norm(1e-5f);
    Tensor mean = be().zeros({s[1]}), var = be().zeros({s[1]});
    const Tensor y = down(k->forward(up(x), up(g), up(bt), mean, var, Mode::Train));
    EXPECT_CLOSE(y, reference::batch_norm(x, g, bt, nullptr, nullptr, 1e-5), what + " train forward vs naive");
    Tensor r = random_tensor(s, rng);
    Tensor dg = be().zeros({s[1]}), db = be().zeros({s[1]});
    const Tensor dx = down(k->backward(up(r), up(g), dg, db));
    Tensor host_mean = down(mean), host_var = down(var);
    EXPECT_CLOSE(down(k->forward(up(x), up(g), up(bt), mean, var, Mode::Eval)),
                 reference::batch_norm(x, g, bt, &host_mean, &host_var, 1e-5), what + " eval forward vs naive");
    // Inference keeps nothing for a backward (Mode::Eval), also after a training forward whose backward never
    // came (a step the loss guard rolled back): a backward after it is refused.
    Tensor em = be().zeros({s[1]}), ev = be().zeros({s[1]}), edg = be().zeros({s[1]}), edb = be().zeros({s[1]});
    k->forward(up(x), up(g), up(bt), em, ev, Mode::Train);
    k->forward(up(x), up(g), up(bt), mean, var, Mode::Eval);
    EXPECT_THROW(k->backward(up(r), up(g), edg, edb), std::logic_error) << what;
    if (auto ck = cpu_kernel([&](Backend& c) { return c.make_batch_norm(1e-5f); })) {
      Tensor cm = Tensor::zeros({s[1]}), cv = Tensor::zeros({s[1]}), cdg = Tensor::zeros({s[1]}),
             cdb = Tensor::zeros({s[1]});
      ck->forward(x, g, bt, cm, cv, Mode::Train);
      EXPECT_CLOSE(host_mean, cm, what + " batch mean vs CPU");
      EXPECT_CLOSE(host_var, cv, what + " batch variance vs CPU");
      EXPECT_CLOSE(dx, env().cpu->to_plain(ck->backward(r, g, cdg, cdb)), what + " backward vs CPU");
      EXPECT_CLOSE(down(dg), cdg, what + " dgamma vs CPU");
      EXPECT_CLOSE(down(db), cdb, what + " dbeta vs CPU");
    }
  }
}

// d activation / dx from the output y, as the kernels take it (for ReLU and LeakyReLU, whose slope is >= 0,
// the input's sign serves as well).
double derivative_at(const EltwiseSpec& spec, double y) {
  switch (spec.kind) {
    case EltwiseKind::ReLU: return y > 0 ? 1 : 0;
    case EltwiseKind::LeakyReLU: return y > 0 ? 1 : spec.alpha;
    case EltwiseKind::Tanh: return 1 - y * y;
    case EltwiseKind::Scale: return spec.alpha;
  }
  return 1;
}

TEST(Conformance, Activations) {
  for (auto spec : {relu(), leaky_relu(0.3f), tanh_activation(), scale_by(1.2f)}) {
    Rng rng(20);
    Tensor x = random_tensor({2, 3, 4, 5}, rng, -2.f, 2.f, 0.02f), r = random_tensor({2, 3, 4, 5}, rng);
    auto k = be().make_eltwise(spec);
    const Tensor y_dev = k->forward(up(x));
    const Tensor y = down(y_dev);
    EXPECT_CLOSE(y, reference::eltwise(x, spec), "activation forward");
    const Tensor dx = down(k->backward(up(r), y_dev));  // from the output, as the layer calls it
    Tensor expected = Tensor::zeros(x.shape());
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double v = x[i];
      expected[i] = static_cast<float>(r[i] * derivative_at(spec, spec.kind == EltwiseKind::Tanh ? std::tanh(v) : v));
    }
    EXPECT_CLOSE(dx, expected, "activation backward");
  }
  // In a bf16/fp16 run the layers hand activations over in that type: the kernels' half paths, against the same
  // formulas on the rounded values (the output's derivative from the rounded output, as the kernels take it).
  if (env().precision == Precision::FP32) return;
  const DType half = env().precision == Precision::BF16 ? DType::BF16 : DType::F16;
  for (auto spec : {relu(), leaky_relu(0.3f), tanh_activation(), scale_by(1.2f)}) {
    Rng rng(20);
    const Tensor x = random_tensor({2, 3, 4, 5}, rng, -2.f, 2.f, 0.02f), r = random_tensor({2, 3, 4, 5}, rng);
    const Tensor x_dev = be().cast(up(x), half), r_dev = be().cast(up(r), half);
    auto k = be().make_eltwise(spec);
    const Tensor y_dev = k->forward(x_dev);
    EXPECT_EQ(y_dev.dtype(), half) << "activation forward keeps the input's type";
    const Tensor y = down(y_dev), rounded_r = down(r_dev);
    EXPECT_CLOSE(y, reference::eltwise(down(x_dev), spec), std::string("activation forward in ") + dtype_name(half));
    const Tensor dx = down(k->backward(r_dev, y_dev));
    Tensor expected = Tensor::zeros(x.shape());
    for (std::int64_t i = 0; i < x.numel(); ++i)
      expected[i] = static_cast<float>(rounded_r[i] * derivative_at(spec, y[i]));
    EXPECT_CLOSE(dx, expected, std::string("activation backward in ") + dtype_name(half));
  }
}

TEST(Conformance, InnerProduct) {
  Rng rng(21);
  Tensor x = random_tensor({5, 9}, rng), w = random_tensor({4, 9}, rng), b = random_tensor({4}, rng),
         r = random_tensor({5, 4}, rng);
  auto k = be().make_inner_product(true);
  Tensor dev_b = up(b);
  const Tensor y = down(k->forward(up(x), up(w), &dev_b, Mode::Train));
  EXPECT_CLOSE(y, reference::linear(x, w, &b), "linear forward");
  Tensor dw = be().zeros({4, 9}), db = be().zeros({4});
  k->backward_weights(up(x), up(r), dw, &db);
  const Tensor dx = down(k->backward_data(up(r), up(w)));
  const Tensor y0 = reference::linear(x, w, nullptr);
  expect_adjoint(y0, r, x, dx, "linear backward data");
  expect_adjoint(y0, r, w, down(dw), "linear backward weights");
  Tensor expected = Tensor::zeros({4});
  for (std::int64_t i = 0; i < r.numel(); ++i) expected[i % 4] += r[i];
  EXPECT_CLOSE(down(db), expected, "linear bias gradient");
  // Weights and their gradient as views one float into a buffer, as the parameter arena places them (no
  // alignment beyond the element's): the results must not change.
  Tensor host_w = Tensor::zeros({4 * 9 + 1});
  std::memcpy(host_w.data() + 1, w.data(), sizeof(float) * 36);
  const Tensor w_buffer = up(host_w), dw_buffer = be().zeros({4 * 9 + 1});
  const Tensor w_odd = Tensor::on_storage(w_buffer.storage(), {4, 9}, DType::F32, nullptr, sizeof(float));
  Tensor dw_odd = Tensor::on_storage(dw_buffer.storage(), {4, 9}, DType::F32, nullptr, sizeof(float));
  auto k2 = be().make_inner_product(true);
  EXPECT_CLOSE(down(k2->forward(up(x), w_odd, &dev_b, Mode::Train)), y,
               "linear forward, weights 4 bytes into their buffer");
  Tensor db2 = be().zeros({4});
  k2->backward_weights(up(x), up(r), dw_odd, &db2);
  EXPECT_CLOSE(down(dw_odd), down(dw), "linear weight gradient, 4 bytes into its buffer");
  EXPECT_CLOSE(down(k2->backward_data(up(r), w_odd)), dx, "linear backward data, weights 4 bytes into their buffer");
}

// ---- the backend ops ----

TEST(Conformance, ElementwiseCopiesAndDropout) {
  Rng rng(22);
  Tensor a = random_tensor({2, 3, 4, 5}, rng), b = random_tensor({2, 3, 4, 5}, rng);
  Tensor y = up(b);
  be().axpby(2.f, up(a), -0.5f, y);
  Tensor expected = Tensor::zeros(a.shape());
  for (std::int64_t i = 0; i < a.numel(); ++i) expected[i] = 2.f * a[i] - 0.5f * b[i];
  EXPECT_LE(error_ratio(down(y), expected, 1e-6), 1.0) << "axpby (F32, exact up to rounding)";
  EXPECT_TRUE(be().all_finite(y));
  Tensor poisoned = b.clone();
  poisoned[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(be().all_finite(up(poisoned)));
  poisoned[7] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(be().all_finite(up(poisoned)));
  // A 5D face into a buffer and back with accumulate: against the CPU's box copy, bit for bit.
  Tensor big = random_tensor({2, 3, 6, 5, 4}, rng), buffer = random_tensor({2, 3, 1, 5, 4}, rng);
  const Box face{{0, 0, 5, 0, 0}, {2, 3, 1, 5, 4}};
  Tensor dev_buffer = up(buffer), dev_big = up(big);
  be().copy_box(dev_big, face, dev_buffer, Box::whole(buffer.shape()), CopyMode::Accumulate);
  be().copy_box(dev_buffer, Box::whole(buffer.shape()), dev_big, Box{{0, 0, 0, 0, 0}, {2, 3, 1, 5, 4}},
                CopyMode::Overwrite);
  Tensor host_buffer = buffer.clone(), host_big = big.clone();
  env().cpu->copy_box(host_big, face, host_buffer, Box::whole(buffer.shape()), CopyMode::Accumulate);
  env().cpu->copy_box(host_buffer, Box::whole(buffer.shape()), host_big, Box{{0, 0, 0, 0, 0}, {2, 3, 1, 5, 4}},
                      CopyMode::Overwrite);
  EXPECT_EQ(error_ratio(down(dev_big), host_big, 1e-7), 0.0) << "copy_box";
  // Dropout: the same mask bits on every backend, for a slab as for the whole.
  const DropoutMask mask{0.4f, 99, 3, GlobalPlacement{{2, 3, 8, 4, 5}, {0, 0, 2, 0, 0}}};
  Tensor slab = random_tensor({2, 3, 6, 4, 5}, rng);
  const Tensor dropped = down(be().dropout(up(slab), mask));
  const Tensor reference = env().cpu->dropout(slab, mask);
  for (std::int64_t i = 0; i < slab.numel(); ++i)
    ASSERT_EQ(dropped[i] == 0.f, reference[i] == 0.f) << "dropout mask differs from the CPU's at " << i;
  EXPECT_CLOSE(dropped, reference, "dropout values");
  // Concat/split round trip.
  Tensor c1 = random_tensor({2, 2, 3, 3}, rng), c2 = random_tensor({2, 3, 3, 3}, rng);
  const Tensor cat = be().concat_channels({up(c1), up(c2)});
  EXPECT_EQ(error_ratio(down(cat), reference::concat_channels({c1, c2}), 1e-7), 0.0) << "concat";
  const auto parts = be().split_channels(cat, {2, 3});
  EXPECT_EQ(error_ratio(down(parts[1]), c2, 1e-7), 0.0) << "split";
}

TEST(Conformance, InputUploads) {
  // Batches assembled in the backend's input memory (page-locked on a GPU) and uploaded while the
  // kernels queued before them still run (the training loop's next batch): each arrives bit for bit,
  // and the work queued after the upload sees all of it.
  Rng rng(31);
  const Shape s{2, 4, 16, 16, 16};
  Tensor work = up(random_tensor(s, rng));
  for (int round = 0; round < 3; ++round) {
    std::pmr::vector<float> batch(static_cast<std::size_t>(s.numel()), be().input_memory());
    const Tensor values = random_tensor(s, rng);
    std::memcpy(batch.data(), values.data(), values.bytes());
    for (int i = 0; i < 8; ++i) be().axpby(0.5f, work, 0.5f, work);  // a step's kernels, queued first
    const Tensor input = be().upload(Tensor::view(s, batch.data()));
    EXPECT_EQ(input.device(), be().device());
    Tensor y = be().zeros(s);
    be().axpby(1.f, input, 0.f, y);
    const Tensor arrived = down(y);  // waits for the queue
    EXPECT_EQ(std::memcmp(arrived.data(), batch.data(), values.bytes()), 0) << "upload " << round;
    EXPECT_TRUE(be().idle()) << "idle after the queue ran dry";
  }
}

TEST(Conformance, NormalisationStatistics) {
  Rng rng(23);
  const Shape s{2, 3, 4, 5};
  Tensor x = random_tensor(s, rng, -1.f, 2.f), g = random_tensor({3}, rng, 0.5f, 1.5f), bt = random_tensor({3}, rng);
  Tensor r = random_tensor(s, rng);
  for (NormGroups groups : {NormGroups::PerSampleChannel, NormGroups::PerChannel}) {
    const double count = groups == NormGroups::PerChannel ? 40 : 20;
    const Tensor sums = be().norm_sums(up(x), groups);
    const Tensor y = down(be().norm_apply(up(x), sums, count, up(g), up(bt), 1e-5f, groups));
    EXPECT_CLOSE(y,
                 groups == NormGroups::PerChannel ? reference::batch_norm(x, g, bt, nullptr, nullptr, 1e-5)
                                                  : reference::instance_norm(x, g, bt, 1e-5),
                 "normalisation forward vs naive");
    if (env().is_cpu()) continue;  // its backward is checked by finite differences in test_backend_ops.cpp
    const Tensor bsums = be().norm_backward_sums(up(r), up(x), sums, count, 1e-5f, groups);
    Tensor dg = be().zeros({3}), db = be().zeros({3});
    const Tensor dx = down(be().norm_backward_apply(up(r), up(x), sums, bsums, count, up(g), 1e-5f, groups, dg, db));
    const Tensor csums = env().cpu->norm_sums(x, groups);
    Tensor cdg = Tensor::zeros({3}), cdb = Tensor::zeros({3});
    const Tensor cdx =
        env().cpu->norm_backward_apply(r, x, csums, env().cpu->norm_backward_sums(r, x, csums, count, 1e-5f, groups),
                                       count, g, 1e-5f, groups, cdg, cdb);
    EXPECT_CLOSE(dx, cdx, "normalisation backward vs CPU");
    EXPECT_CLOSE(down(dg), cdg, "dgamma vs CPU");
    EXPECT_CLOSE(down(db), cdb, "dbeta vs CPU");
  }
}

TEST(Conformance, Losses) {
  if (env().is_cpu()) GTEST_SKIP() << "the CPU backend's losses are the definitions (test_losses.cpp checks them)";
  Rng rng(24);
  Tensor logits = random_tensor({3, 4, 2, 3}, rng, -2.f, 2.f);
  std::vector<std::int32_t> labels(18);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(rng.below(4));
  auto compare = [&](const LossResult& got, const LossResult& want, const char* what) {
    EXPECT_NEAR(got.loss, want.loss, 1e-6 * (1 + std::fabs(want.loss))) << what;
    EXPECT_LE(error_ratio(down(got.gradient), want.gradient, 1e-5), 1.0) << what << " gradient";
  };
  compare(be().softmax_cross_entropy(up(logits), labels, 0.1f), softmax_cross_entropy(logits, labels, 0.1f),
          "cross-entropy");
  compare(be().dice_loss(up(logits), labels, false), dice_loss(logits, labels, false), "dice");
  compare(be().dice_cross_entropy(up(logits), labels, false), dice_cross_entropy(logits, labels, false), "dice + CE");
  // The split form a spatial split uses (sums over its group, then the loss): the CPU's sums, and the
  // loss and gradient from the CPU's sums.
  const Tensor sums = be().to_host(be().dice_sums(up(logits), labels));
  const Tensor cpu_sums = env().cpu->dice_sums(logits, labels);
  ASSERT_EQ(sums.shape(), cpu_sums.shape());
  ASSERT_EQ(sums.dtype(), DType::F64);
  for (std::int64_t i = 0; i < sums.numel(); ++i) {
    const double got = static_cast<const double*>(sums.raw())[i], want = static_cast<const double*>(cpu_sums.raw())[i];
    EXPECT_NEAR(got, want, 1e-9 * (1 + std::fabs(want))) << "dice_sums[" << i << "]";
  }
  compare(be().dice_loss_from_sums(up(logits), labels, be().to_device(cpu_sums.clone()), false),
          dice_loss(logits, labels, false), "dice from the CPU's sums");
  Tensor pred = random_tensor({4, 4}, rng);
  std::vector<float> target(16);
  for (auto& t : target) t = rng.uniform_float(-1.f, 1.f);
  Tensor target_t = Tensor::zeros({4, 4});
  std::copy(target.begin(), target.end(), target_t.data());
  compare(be().mean_squared_error(up(pred), target), mean_squared_error(pred, target_t), "mse");
}

TEST(Conformance, OptimizerUpdates) {
  if (env().is_cpu()) GTEST_SKIP() << "the CPU backend's updates are the reference (test_optim*.cpp check them)";
  for (const char* kind : {"sgd", "lars", "adam"}) {
    auto run = [&](Backend& b) {
      ParameterTable t;
      t.declare_parameter("fc.weight", {3, 4});
      t.declare_parameter("fc.bias", {3});
      t.finalize(b);
      for (std::size_t i = 0; i < t.parameter_count(); ++i) t.values()[i] = 0.5f - 0.07f * static_cast<float>(i);
      t.commit();
      OptimizerOptions o;
      o.kind = kind;
      o.weight_decay = 0.01f;
      o.lars_eta = 0.02f;
      auto opt = make_optimizer(t, o);
      for (int s = 1; s <= 3; ++s) {
        std::vector<float> g(t.parameter_count());
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + s));
        t.write(Arena::Gradients, g);
        opt->step(t, 0.1f);
      }
      return t.read(Arena::Values);
    };
    const auto got = run(be());
    const auto want = run(*env().cpu);
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-5 * std::fabs(want[i])) << kind << " " << i;
  }
}

// ---- models: forward/backward and a 5-step loss sequence against the CPU backend ----

struct ModelCase {
  const char* name;
  ModelOptions options;
  // Relative L2 bound on the output and every parameter gradient against the CPU backend; ResNet
  // and U-Net at random initialisation are ill-conditioned (docs/trainer.md, cross-check), so a
  // backend with another summation order lands percent away on some gradients.
  double l2;
};

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(d / (n + 1e-300));
}

std::vector<double> loss_sequence(Backend& b, const ModelCase& c, std::vector<float>* output,
                                  std::vector<float>* grads) {
  auto model = build_model(c.name, std::shared_ptr<Backend>(&b, [](Backend*) {}), c.options);
  Rng rng(25);
  Tensor x = random_tensor(model->input_shape(), rng);
  const Shape out = model->output_shape();
  std::vector<std::int32_t> labels;
  std::vector<float> targets;
  if (std::string(c.name) == "cosmoflow") {
    for (std::int64_t i = 0; i < out.numel(); ++i) targets.push_back(rng.uniform_float(-0.5f, 0.5f));
  } else {
    const std::int64_t per = std::string(c.name) == "unet3d" ? out.spatial_size() : 1;
    for (std::int64_t i = 0; i < out[0] * per; ++i)
      labels.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(out[1]))));
  }
  auto optimizer = make_sgd(model->parameters(), OptimizerOptions{});
  const Tensor dev_x = b.to_device(x);
  std::vector<double> losses;
  const std::string name = c.name;
  for (int step = 0; step < 5; ++step) {
    Tensor y = model->forward(dev_x, Mode::Train);
    const LossResult l = name == "cosmoflow" ? b.mean_squared_error(y, targets)
                         : name == "unet3d"  ? b.dice_cross_entropy(y, labels, false)
                                             : b.softmax_cross_entropy(y, labels, 0.f);
    losses.push_back(l.loss);
    model->backward(l.gradient);
    if (step == 0) {
      const Tensor host_y = b.to_host(y);
      if (output) output->assign(host_y.data(), host_y.data() + host_y.numel());
      if (grads) *grads = model->parameters().read(Arena::Gradients);
    }
    optimizer->step(model->parameters(), 0.01f);
  }
  return losses;
}

void check_model(const ModelCase& c) {
  std::vector<float> out, grads;
  const auto losses = loss_sequence(be(), c, &out, &grads);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l)) << c.name;
  if (env().is_cpu()) {
    // The CPU run is its own reference: it must repeat bit for bit (the bitwise-resume premise).
    EXPECT_EQ(losses, loss_sequence(be(), c, nullptr, nullptr)) << c.name << ": two CPU runs differ";
    return;
  }
  std::vector<float> cpu_out, cpu_grads;
  const auto cpu_losses = loss_sequence(*env().cpu, c, &cpu_out, &cpu_grads);
  const double scale = env().precision == Precision::FP32 ? 1.0 : 100.0;
  EXPECT_LE(relative_l2(out, cpu_out), 1e-4 * scale) << c.name << " output vs CPU";
  EXPECT_LE(relative_l2(grads, cpu_grads), c.l2 * scale) << c.name << " gradients vs CPU";
  for (std::size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], cpu_losses[i], 1e-4 * scale * (1 + std::fabs(cpu_losses[i]))) << c.name << " step " << i + 1;
}

TEST(Conformance, ModelCosmoFlow) { check_model({"cosmoflow", {.batch = 2, .input_size = 32, .classes = 4}, 1e-4}); }
TEST(Conformance, ModelResNet50) { check_model({"resnet50", {.batch = 2, .input_size = 64, .classes = 5}, 1e-1}); }
TEST(Conformance, ModelUNet3d) {
  check_model({"unet3d", {.batch = 1, .input_size = 64, .input_depth = 32, .classes = 3}, 1e-1});
}

}  // namespace
}  // namespace fanstore::trainer::testing

int main(int argc, char** argv) {
  using namespace fanstore::trainer;
  ::testing::InitGoogleTest(&argc, argv);
  std::string backend = "cpu", precision = "fp32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--backend") backend = argv[i + 1];
    else if (k == "--precision") precision = argv[i + 1];
    else {
      std::cerr << "usage: trainer_conformance --backend cpu|cuda [--precision fp32|bf16|fp16] [gtest options]\n";
      return 2;
    }
  }
  auto& c = fanstore::trainer::testing::env();
  c.cpu = make_cpu_backend({.threads = 2});
  c.precision = parse_precision(precision);
  if (backend == "cpu") {
    if (c.precision != Precision::FP32) {
      std::cout << "SKIP: the CPU backend computes in fp32 only\n";
      return 77;
    }
    c.under_test = c.cpu;
  } else if (backend == "cuda") {
    const CudaAvailability cuda = cuda_availability();
    if (cuda.module_error) {  // an installation problem, not a machine without a GPU: fail, do not skip
      std::cerr << "FAIL: " << cuda.reason << "\n";
      return 1;
    }
    if (!cuda.built || cuda.devices == 0) {
      std::cout << "SKIP: no CUDA device (" << cuda.reason << "); the CUDA conformance cases did not run\n";
      return 77;
    }
    c.under_test = make_backend(BackendChoice{DeviceChoice::Cuda, 0, c.precision, -1});
  } else {
    std::cerr << "unknown backend '" << backend << "' (cpu or cuda)\n";
    return 2;
  }
  std::cout << "conformance of " << c.under_test->describe() << " (" << precision_name(c.precision) << ")\n";
  return RUN_ALL_TESTS();
}
