// Test harness for single layers and the finite-difference gradient check.
#include "layer_harness.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

namespace fanstore::trainer::testing {

std::shared_ptr<Backend> test_backend() {
  // One thread: the test shapes are tiny, and spinning OpenMP workers on a shared 2-core machine
  // cost far more than they save. Fixed, so results repeat exactly.
  static std::shared_ptr<Backend> backend = make_cpu_backend({.threads = 1});
  return backend;
}

Tensor random_tensor(const Shape& shape, Rng& rng, float lo, float hi, float min_gap) {
  Tensor t = Tensor::zeros(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    float v = rng.uniform_float(lo, hi);
    if (min_gap > 0.f && std::fabs(v) < min_gap) v = v < 0 ? v - min_gap : v + min_gap;
    t[i] = v;
  }
  return t;
}

Tensor distinct_tensor(const Shape& shape, Rng& rng, float spacing) {
  Tensor t = Tensor::zeros(shape);
  std::vector<std::int64_t> order(static_cast<std::size_t>(t.numel()));
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next_u64() % i]);
  const float offset = -spacing * static_cast<float>(order.size()) / 2;
  for (std::size_t i = 0; i < order.size(); ++i) t[order[i]] = offset + spacing * static_cast<float>(i);
  return t;
}

LayerHarness::LayerHarness(std::unique_ptr<Layer> layer, std::uint64_t seed)
    : backend_(test_backend()), layer_(std::move(layer)) {
  layer_->attach(*backend_, table_);
  table_.finalize(*backend_);
  Rng rng(seed);
  layer_->initialize(rng);
  const bool norm = layer_->kind().find("Norm") != std::string::npos;
  for (const auto& e : table_.parameters()) {
    const bool scale = norm && e.name.ends_with(".weight");
    for (std::int64_t i = 0; i < e.shape.numel(); ++i)
      table_.values()[e.offset + static_cast<std::size_t>(i)] =
          scale ? rng.uniform_float(0.5f, 1.5f) : rng.uniform_float(-1.f, 1.f);
  }
  table_.commit();
}

Tensor LayerHarness::forward(const std::vector<Tensor>& inputs, Mode mode) {
  return backend_->to_plain(layer_->forward(inputs, mode));
}

std::vector<Tensor> LayerHarness::backward(const Tensor& dy) {
  auto grads = layer_->backward(dy);
  for (auto& g : grads) g = backend_->to_plain(g);
  return grads;
}

namespace {

double weighted_sum(const Tensor& y, const Tensor& r) {
  double sum = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) sum += static_cast<double>(y[i]) * r[i];
  return sum;
}

std::vector<std::int64_t> probe_indices(std::int64_t numel, int samples, Rng& rng) {
  std::vector<std::int64_t> idx;
  if (numel <= samples) {
    for (std::int64_t i = 0; i < numel; ++i) idx.push_back(i);
  } else {
    for (int i = 0; i < samples; ++i)
      idx.push_back(static_cast<std::int64_t>(rng.next_u64() % static_cast<std::uint64_t>(numel)));
  }
  return idx;
}

}  // namespace

double check_gradients(LayerHarness& h, std::vector<Tensor> inputs, const GradientCheck& o) {
  auto loss = [&]() {
    if (o.before_forward) o.before_forward();
    return h.forward(inputs);
  };
  Tensor y = loss();
  Rng rng(99);
  Tensor r = random_tensor(y.shape(), rng);
  auto dx = h.backward(r);
  std::vector<float> dparams(h.table().gradients(), h.table().gradients() + h.table().parameter_count());
  double worst = 0;

  auto probe = [&](float* value, double analytic, const std::string& what) {
    const float saved = *value;
    *value = static_cast<float>(saved + o.epsilon);
    const double plus = weighted_sum(loss(), r);
    *value = static_cast<float>(saved - o.epsilon);
    const double minus = weighted_sum(loss(), r);
    *value = saved;
    // The probe moved the value by the float-rounded step, not exactly epsilon.
    const double step =
        static_cast<double>(static_cast<float>(saved + o.epsilon)) - static_cast<float>(saved - o.epsilon);
    const double numeric = (plus - minus) / step;
    const double bound = o.atol + o.rtol * std::fabs(numeric);
    worst = std::max(worst, std::fabs(analytic - numeric) / bound);
    EXPECT_LE(std::fabs(analytic - numeric), bound)
        << h.layer().name() << " " << what << ": analytic " << analytic << " numeric " << numeric;
  };

  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (!o.differentiable_inputs.empty() && !o.differentiable_inputs[k]) continue;
    for (auto i : probe_indices(inputs[k].numel(), o.samples, rng))
      probe(inputs[k].data() + i, dx.at(k)[i], "input " + std::to_string(k) + "[" + std::to_string(i) + "]");
  }
  for (const auto& e : h.table().parameters())
    for (auto i : probe_indices(e.shape.numel(), o.samples, rng)) {
      const auto at = e.offset + static_cast<std::size_t>(i);
      probe(h.table().values() + at, dparams[at], e.name + "[" + std::to_string(i) + "]");
    }
  // Leave the layer in the state of the analytic pass (backward refers to the last forward).
  loss();
  return worst;
}

double tolerance_ratio(const Tensor& a, const Tensor& b, double atol, double rtol) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (std::int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / (atol + rtol * std::fabs(b[i])));
  return worst;
}

}  // namespace fanstore::trainer::testing
