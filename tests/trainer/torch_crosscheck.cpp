// PyTorch cross-check driver: writes a model's weights and input, runs torch_crosscheck.py on them,
// runs the same forward/backward here, and compares outputs, every parameter gradient, the input
// gradient and the updated BN running statistics. Exit 0 pass, 1 fail, 77 torch missing (SKIP).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "fanstore/env_tooling.hpp"
#include "trainer/models.hpp"
#include "trainer/tensor_file.hpp"

namespace {

using namespace fanstore::trainer;
constexpr int kSkip = 77;

struct Case {
  ModelOptions options;
  // Outputs and running statistics: max|ours - torch64| / max|torch64| per tensor (well
  // conditioned, 1e-4). Gradients: |ours - torch64|_2 / |torch64|_2 per tensor. The max-based error
  // of a gradient is not a usable test for ReLU networks with batch/instance norm at random
  // initialisation: a ReLU input within float32 rounding of 0 takes the other branch and moves that
  // channel's gradient by a fraction of itself, so float32 PyTorch itself lands up to 0.25 (max
  // based) away from float64 depending on the random draw. Such a flip barely moves the L2 error of
  // the tensor, a wrong formula, layout or weight mapping moves it by O(1). The tool prints both,
  // and float32 PyTorch's numbers next to ours. CosmoFlow has no normalisation: a strict bound.
  double output_tolerance, gradient_tolerance;
};
// Gradients within this bound are counted and reported, as a measure of how many agree tightly.
constexpr double kTightGradient = 2e-3;

// Small but complete configurations (every block present) that run in seconds on 2 cores.
std::map<std::string, Case> cases() {
  std::map<std::string, Case> c;
  c["resnet50"] = {{.batch = 2, .input_size = 64, .classes = 10}, 1e-4, 1e-1};
  // 32 x 64 x 64 keeps 4 voxels at the bottleneck (PyTorch refuses instance norm over 1) at half
  // the cost of 64^3; float64 PyTorch convolutions are slow.
  c["unet3d"] = {{.batch = 1, .input_size = 64, .input_depth = 32, .classes = 3}, 1e-4, 1e-1};
  c["cosmoflow"] = {{.batch = 2, .input_size = 32, .classes = 4}, 1e-4, 1e-4};
  return c;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max|a - b| / max|b| (an absolute error scaled to the tensor's magnitude: element-wise relative
// errors are meaningless for gradients that cross zero).
double scaled_error(const std::vector<float>& ours, const std::vector<float>& ref) {
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(ours[i]) - ref[i]));
  const double scale = max_abs(ref);
  return scale > 0 ? worst / scale : worst;
}

// |a - b|_2 / |b|_2: robust to one ReLU input flipping sides near 0 (which moves a few elements of
// a gradient by a lot and the whole tensor by little), while a wrong formula, layout or weight
// mapping moves it by O(1).
double relative_l2(const std::vector<float>& ours, const std::vector<float>& ref) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(ours[i]) - ref[i];
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data(), t.data() + t.numel()); }

int run(int argc, char** argv) {
  std::string model_name, python = fanstore::env::PythonInterpreter(), script, workdir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model_name = v;
    else if (k == "--python") python = v;
    else if (k == "--script") script = v;
    else if (k == "--workdir") workdir = v;
    else throw std::invalid_argument("unknown option " + k);
  }
  auto all = cases();
  if (!all.count(model_name) || script.empty() || workdir.empty())
    throw std::invalid_argument(
        "usage: trainer_torch_crosscheck --model resnet50|unet3d|cosmoflow --script S --workdir D [--python P]");
  const Case& c = all.at(model_name);
  std::filesystem::create_directories(workdir);

  auto model = build_model(model_name, make_cpu_backend({.threads = 2}), c.options);
  ParameterTable& table = model->parameters();
  // Default init leaves norm scales at 1 and shifts/statistics at 0; randomise them so every
  // parameter and buffer takes part in the comparison.
  Rng rng(2024);
  for (const auto& e : table.parameters()) {
    const bool norm =
        e.shape.rank() == 1 && e.name.find("conv") == std::string::npos && e.name.find("fc") == std::string::npos;
    if (!norm) continue;
    const bool scale = e.name.ends_with(".weight");
    for (std::int64_t i = 0; i < e.shape.numel(); ++i)
      table.values()[e.offset + static_cast<std::size_t>(i)] =
          scale ? rng.uniform_float(0.5f, 1.5f) : rng.uniform_float(-0.5f, 0.5f);
  }
  for (const auto& e : table.buffers()) {
    const bool variance = e.name.ends_with("running_var");
    for (std::int64_t i = 0; i < e.shape.numel(); ++i)
      table.buffer_values()[e.offset + static_cast<std::size_t>(i)] =
          variance ? rng.uniform_float(0.5f, 1.5f) : rng.uniform_float(-0.2f, 0.2f);
  }
  Tensor x = Tensor::zeros(model->input_shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) x[i] = rng.uniform_float(-1.f, 1.f);
  Tensor dy = Tensor::zeros(model->output_shape());
  for (std::int64_t i = 0; i < dy.numel(); ++i) dy[i] = rng.uniform_float(-1.f, 1.f);

  const auto dir = std::filesystem::path(workdir);
  auto state = export_state(table);
  const auto& o = c.options;
  state.push_back({"config",
                   Shape{4},
                   {static_cast<float>(o.batch), static_cast<float>(o.input_size), static_cast<float>(o.classes),
                    static_cast<float>(model->input_shape()[1])}});
  write_tensor_file((dir / "model.bin").string(), state);
  write_tensor_file((dir / "io.bin").string(), {to_named("input", x), to_named("output_grad", dy)});

  const std::string command = python + " " + script + " --model " + model_name + " --workdir " + workdir;
  std::cout << "running: " << command << std::endl;
  const int status = std::system(command.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (code == kSkip) {
    std::cout << "\n*** SKIP: PyTorch is not available to " << python << "; the " << model_name
              << " cross-check did NOT run ***\n"
              << std::endl;
    return kSkip;
  }
  if (code != 0) throw std::runtime_error("torch_crosscheck.py failed with exit code " + std::to_string(code));

  Tensor y = model->forward(x, Mode::Train);
  Tensor dx = model->backward(dy);
  auto ref = read_tensor_file((dir / "torch.bin").string());

  // Each tensor: our error and float32 PyTorch's error, both against float64 PyTorch.
  struct Row {
    std::string name;
    double error, torch32_error, tolerance;
    double versus_torch32;  // max|ours - torch float32| / max|x64|: small when both round alike
    double l2, torch32_l2;  // relative L2 errors against float64, ours and float32 PyTorch's
    bool gradient;          // judged by the L2 error
    double judged() const { return gradient ? l2 : error; }
    bool ok() const { return judged() <= tolerance; }
  };
  auto compare = [&](const std::string& name, const std::vector<float>& ours, const std::string& key, double tol,
                     bool gradient) {
    const auto& ref64 = find_tensor(ref, key).data;
    const auto& ref32 = find_tensor(ref, "f32/" + key).data;
    const double scale = std::max(max_abs(ref64), 1e-30f);
    return Row{name,
               scaled_error(ours, ref64),
               scaled_error(ref32, ref64),
               tol,
               scaled_error(ours, ref32) * max_abs(ref32) / scale,
               relative_l2(ours, ref64),
               relative_l2(ref32, ref64),
               gradient};
  };
  std::vector<Row> rows;
  rows.push_back(compare("output", values(y), "output", c.output_tolerance, false));
  rows.push_back(compare("input_grad", values(dx), "input_grad", c.gradient_tolerance, true));
  for (const auto& e : table.parameters()) {
    std::vector<float> g(table.gradients() + e.offset, table.gradients() + e.offset + e.shape.numel());
    rows.push_back(compare("grad " + e.name, g, "grad/" + e.name, c.gradient_tolerance, true));
  }
  for (const auto& e : table.buffers()) {
    std::vector<float> b(table.buffer_values() + e.offset, table.buffer_values() + e.offset + e.shape.numel());
    rows.push_back(compare("buffer " + e.name, b, "state/" + e.name, c.output_tolerance, false));
  }
  bool ok = true;
  std::size_t gradients = 0, tight = 0;
  const Row* worst_grad = nullptr;
  const Row* worst_buffer = nullptr;
  const Row* worst_l2 = nullptr;
  for (const auto& r : rows) {
    if (!r.ok()) {
      ok = false;
      std::cout << "MISMATCH " << r.name << ": " << (r.gradient ? "relative L2 " : "") << r.judged() << " > "
                << r.tolerance << " (float32 PyTorch: " << (r.gradient ? r.torch32_l2 : r.torch32_error) << ")\n";
    }
    if (r.name.starts_with("grad ") || r.name == "input_grad") {
      ++gradients;
      tight += r.error <= kTightGradient;
    }
    if (r.name.starts_with("grad ") && (!worst_grad || r.error > worst_grad->error)) worst_grad = &r;
    if (r.gradient && (!worst_l2 || r.l2 > worst_l2->l2)) worst_l2 = &r;
    if (r.name.starts_with("buffer ") && (!worst_buffer || r.error > worst_buffer->error)) worst_buffer = &r;
  }
  auto line = [](const Row* r) {
    std::ostringstream s;
    s << std::scientific << std::setprecision(3);
    if (r)
      s << r->error << " (float32 PyTorch: " << r->torch32_error << "; ours vs float32 PyTorch: " << r->versus_torch32
        << ")";
    else s << "none";
    return s.str();
  };
  std::cout << model_name << " vs PyTorch float64; error = max|x - x64| / max|x64| per tensor:\n"
            << "  output:          " << line(&rows[0]) << "\n"
            << "  input gradient:  " << line(&rows[1]) << "\n"
            << "  parameter grads: " << line(worst_grad) << " worst of " << table.parameters().size() << ", "
            << (worst_grad ? worst_grad->name : "") << "\n"
            << "  running stats:   " << line(worst_buffer) << " worst of " << table.buffers().size() << "\n"
            << "  largest ours vs float32 PyTorch over all tensors: " << std::scientific << std::setprecision(3)
            << std::max_element(rows.begin(), rows.end(),
                                [](const Row& a, const Row& b) { return a.versus_torch32 < b.versus_torch32; })
                   ->versus_torch32
            << "\n"
            << "  gradients within " << kTightGradient << ": " << tight << " of " << gradients << "\n"
            << "  worst relative L2 gradient error: " << (worst_l2 ? worst_l2->l2 : 0.0)
            << " (float32 PyTorch: " << (worst_l2 ? worst_l2->torch32_l2 : 0.0) << ") "
            << (worst_l2 ? worst_l2->name : "") << "\n"
            << "  tolerances: outputs and running stats " << c.output_tolerance << " (max based), gradients "
            << c.gradient_tolerance << " (relative L2)"
            << "\n"
            << (ok ? "PASS" : "FAIL") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "trainer_torch_crosscheck: " << e.what() << "\n";
    return 1;
  }
}
