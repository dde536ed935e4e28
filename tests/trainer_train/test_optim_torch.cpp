// SGD (plain and Nesterov) and Adam against torch.optim in float32, 5 steps; skips loudly without torch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "fanstore/env_tooling.hpp"
#include "trainer/backend.hpp"
#include "trainer/optim.hpp"

#ifndef FANSTORE_OPTIM_TORCH_SCRIPT
#error "FANSTORE_OPTIM_TORCH_SCRIPT must name tests/trainer_train/optim_torch.py"
#endif

namespace fanstore::trainer {
namespace {

// Runs the reference; returns false (and the exit code) when torch is missing.
bool torch_reference(const std::string& kind, std::vector<double>& out, int& code) {
  const std::string cmd = std::string(env::PythonInterpreter()) + " " FANSTORE_OPTIM_TORCH_SCRIPT " " + kind;
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return false;
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) text += buf;
  code = WEXITSTATUS(::pclose(pipe));
  if (code != 0) return false;
  std::istringstream in(text);
  double v;
  while (in >> v) out.push_back(v);
  return true;
}

void run_case(const std::string& kind) {
  std::vector<double> expected;
  int code = 0;
  if (!torch_reference(kind, expected, code)) {
    if (code == 77)
      GTEST_SKIP() << "SKIPPED LOUDLY: " << env::PythonInterpreter() << " has no torch; optimizer cross-check not run";
    FAIL() << "optim_torch.py failed with exit code " << code;
  }
  ParameterTable t;
  t.declare_parameter("fc.weight", Shape{2, 3});
  t.declare_parameter("fc.bias", Shape{2});
  auto backend = make_cpu_backend({1});
  t.finalize(*backend);
  for (std::size_t i = 0; i < 8; ++i) t.values()[i] = 0.5f - 0.1f * static_cast<float>(i);
  OptimizerOptions o;
  o.kind = kind == "adam" ? "adam" : "sgd";
  o.nesterov = kind == "nesterov";
  o.momentum = 0.9f;
  o.weight_decay = 0.01f;
  auto opt = make_optimizer(t, o);
  const float lr = kind == "adam" ? 0.01f : 0.1f;
  for (int s = 1; s <= 5; ++s) {
    for (std::size_t i = 0; i < 8; ++i)
      t.gradients()[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + s));
    opt->step(t, lr);
  }
  ASSERT_EQ(expected.size(), 8u);
  // Tolerance: both sides are float32 with a different order of operations: |a-b| <= 1e-6 + 1e-5|ref|.
  for (std::size_t i = 0; i < 8; ++i)
    EXPECT_NEAR(t.values()[i], expected[i], 1e-6 + 1e-5 * std::fabs(expected[i])) << kind << " " << i;
}

TEST(OptimTorch, Sgd) { run_case("sgd"); }
TEST(OptimTorch, SgdNesterov) { run_case("nesterov"); }
TEST(OptimTorch, Adam) { run_case("adam"); }

}  // namespace
}  // namespace fanstore::trainer
