// Optimizers and schedules against hand-computed PyTorch formulas (double precision references).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "trainer/backend.hpp"
#include "trainer/optim.hpp"
#include "trainer/schedule.hpp"

namespace fanstore::trainer {
namespace {

// One weight matrix (decayed, LARS-scaled) and one bias vector (exempt from LARS and its decay).
Backend& host_backend() {
  static auto backend = make_cpu_backend({1});
  return *backend;
}

ParameterTable small_table() {
  ParameterTable t;
  t.declare_parameter("fc.weight", Shape{2, 3});  // (out, in)
  t.declare_parameter("fc.bias", Shape{2});
  t.finalize(host_backend());
  for (std::size_t i = 0; i < t.parameter_count(); ++i) t.values()[i] = 0.5f - 0.1f * static_cast<float>(i);
  return t;
}

void set_gradients(ParameterTable& t, int step) {
  for (std::size_t i = 0; i < t.parameter_count(); ++i)
    t.gradients()[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + step));
}

TEST(Optim, SgdMomentumWeightDecayMatchesTorchFormula) {
  ParameterTable t = small_table();
  OptimizerOptions o;
  o.kind = "sgd";
  o.momentum = 0.9f;
  o.weight_decay = 0.01f;
  auto opt = make_optimizer(t, o);
  std::vector<double> w(t.values(), t.values() + t.parameter_count()), buf(w.size(), 0);
  for (int s = 0; s < 4; ++s) {
    set_gradients(t, s);
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double d = t.gradients()[i] + 0.01 * w[i];
      buf[i] = s == 0 ? d : 0.9 * buf[i] + d;  // torch: the first step initialises buf = d
      w[i] -= 0.1 * buf[i];
    }
    opt->step(t, 0.1f);
  }
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(t.values()[i], w[i], 1e-6) << i;
  EXPECT_EQ(opt->steps_taken(), 4u);
}

TEST(Optim, LarsScalesWeightsByTrustRatioAndExemptsBiases) {
  ParameterTable t = small_table();
  OptimizerOptions o;
  o.kind = "lars";
  o.momentum = 0.9f;
  o.weight_decay = 0.001f;
  o.lars_eta = 0.02f;
  auto opt = make_optimizer(t, o);
  std::vector<double> w(t.values(), t.values() + t.parameter_count()), buf(w.size(), 0);
  for (int s = 0; s < 3; ++s) {
    set_gradients(t, s);
    double wn = 0, gn = 0;
    for (std::size_t i = 0; i < 6; ++i) {
      wn += w[i] * w[i];
      gn += double(t.gradients()[i]) * t.gradients()[i];
    }
    wn = std::sqrt(wn);
    gn = std::sqrt(gn);
    const double trust = 0.02 * wn / (gn + 0.001 * wn);
    for (std::size_t i = 0; i < w.size(); ++i) {
      const bool weight = i < 6;
      const double d = weight ? trust * (t.gradients()[i] + 0.001 * w[i]) : t.gradients()[i];
      buf[i] = 0.9 * buf[i] + d;
      w[i] -= 0.5 * buf[i];
    }
    opt->step(t, 0.5f);
  }
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(t.values()[i], w[i], 1e-6) << i;
  EXPECT_TRUE(excluded_from_lars(t.parameters()[1]));
  EXPECT_FALSE(excluded_from_lars(t.parameters()[0]));
}

TEST(Optim, AdamMatchesTorchFormula) {
  ParameterTable t = small_table();
  OptimizerOptions o;
  o.kind = "adam";
  o.weight_decay = 0.01f;
  auto opt = make_optimizer(t, o);
  std::vector<double> w(t.values(), t.values() + t.parameter_count()), m(w.size(), 0), v(w.size(), 0);
  for (int s = 1; s <= 5; ++s) {
    set_gradients(t, s);
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double g = t.gradients()[i] + 0.01 * w[i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      const double mhat = m[i] / (1 - std::pow(0.9, s)), vhat = v[i] / (1 - std::pow(0.999, s));
      w[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    }
    opt->step(t, 0.01f);
  }
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(t.values()[i], w[i], 2e-6) << i;
}

TEST(Optim, UnknownOptimizerIsAnError) {
  ParameterTable t = small_table();
  OptimizerOptions o;
  o.kind = "rmsprop";
  EXPECT_THROW(make_optimizer(t, o), std::invalid_argument);
}

TEST(Schedule, WarmupThenCosineAndPoly) {
  ScheduleOptions s;
  s.base_lr = 1.0;
  s.warmup_steps = 4;
  s.total_steps = 14;
  s.decay = DecayKind::Cosine;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 3), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 4), 1.0);
  EXPECT_NEAR(learning_rate_at(s, 9), 0.5, 1e-12);  // halfway through the decay
  EXPECT_NEAR(learning_rate_at(s, 14), 0.0, 1e-12);
  EXPECT_NEAR(learning_rate_at(s, 100), 0.0, 1e-12);
  s.decay = DecayKind::Poly;
  s.poly_power = 2;
  s.end_lr = 0.1;
  EXPECT_NEAR(learning_rate_at(s, 9), 0.1 + 0.9 * 0.25, 1e-12);
  s.decay = DecayKind::Constant;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 9), 1.0);
  EXPECT_EQ(parse_decay_kind("poly"), DecayKind::Poly);
  EXPECT_THROW(parse_decay_kind("step"), std::invalid_argument);
}

}  // namespace
}  // namespace fanstore::trainer
