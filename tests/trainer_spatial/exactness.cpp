// Serial vs grid: the same model, input and output gradient; everything the grid computes, gathered.
#include "exactness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "spatial_testing.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/normalization.hpp"

namespace fanstore::trainer::testing {
namespace {

Tensor random_tensor(const Shape& shape, std::uint32_t seed) {
  Tensor t = Tensor::zeros(shape);
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    // Distinct-ish values in [-1, 1): max pooling sees no ties.
    t[i] = static_cast<float>(static_cast<double>(s >> 11) / static_cast<double>(1ull << 53) * 2.0 - 1.0);
  }
  return t;
}

// Samples [first, first + count) of a plain host tensor, times `factor`.
Tensor batch_slice(const Tensor& t, std::int64_t first, std::int64_t count, float factor) {
  Shape s = t.shape();
  const std::int64_t per = t.numel() / s[0];
  s[0] = count;
  Tensor out = Tensor::zeros(s);
  for (std::int64_t i = 0; i < count * per; ++i) out[i] = t[first * per + i] * factor;
  return out;
}

// max|got - want| / max|want| over n values.
double error_of(const float* got, const float* want, std::int64_t n) {
  double diff = 0, scale = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return scale > 0 ? diff / scale : diff;
}
double error_of(const Tensor& got, const Tensor& want) {
  return got.numel() == want.numel() ? error_of(got.data(), want.data(), want.numel()) : INFINITY;
}

SpatialBox whole_box(const Shape& s) {
  SpatialBox b;
  for (int i = 2; i < s.rank(); ++i) b.axes.push_back({0, s[i]});
  return b;
}

void shift_norms(Model& m, float shift) {
  std::vector<float> values = m.parameters().read(Arena::Values);
  for (NodeId id = 1; id < m.node_count(); ++id) {
    const Layer* l = m.node_layer(id);
    if (!dynamic_cast<const BatchNorm*>(l) && !dynamic_cast<const InstanceNorm*>(l)) continue;
    const auto& e = m.parameters().parameters().at(l->parameter_handles().at(1).index);  // the shift
    std::fill(values.begin() + static_cast<std::ptrdiff_t>(e.offset),
              values.begin() + static_cast<std::ptrdiff_t>(e.offset + static_cast<std::size_t>(e.shape.numel())),
              shift);
  }
  m.parameters().write(Arena::Values, values);
}

struct SerialRun {
  Tensor y, dx;
  std::vector<float> gradients, buffers;
};

SerialRun run_serial(Model& m, const Tensor& x, const Tensor& dy) {
  Backend& b = m.backend();
  SerialRun r;
  r.y = b.to_host(m.forward(b.to_device(x), Mode::Train)).clone();
  r.dx = b.to_host(m.backward(b.to_device(dy))).clone();
  r.gradients = m.parameters().read(Arena::Gradients);
  r.buffers = m.parameters().read(Arena::Buffers);
  return r;
}

// Terms summed into each element of a parameter's gradient: samples x output positions of a
// convolution (input positions of a transposed one), samples x positions of a normalisation, samples
// of a dense layer.
std::map<std::string, double> reduction_terms(const Model& m, std::int64_t batch) {
  std::map<std::string, double> terms;
  for (NodeId id = 1; id < m.node_count(); ++id) {
    const Layer* l = m.node_layer(id);
    const auto* conv = dynamic_cast<const Convolution*>(l);
    const auto& handles = l->parameter_handles();
    for (std::size_t k = 0; k < handles.size(); ++k) {
      // A transposed convolution's weight sums over its input positions; every bias over the outputs.
      const bool by_input = conv && conv->spec().transposed && k == 0;
      const Shape& positions = by_input ? m.shape(m.node_inputs(id)[0]) : m.shape(id);
      terms[m.parameters().parameters().at(handles[k].index).name] =
          static_cast<double>(batch) * static_cast<double>(positions.spatial_size());
    }
  }
  return terms;
}

// The serial runs a check compares against: the reference, and with calibration two more on inputs one ulp away,
// up on every 7th element and down on others. The sensitivity is the larger change: one such sample can fall well
// under another, and the split's own rounding differs with the CPU's kernels (AVX2 or AVX-512). The runs do not
// depend on the grid, so one reference serves every grid of the same total batch.
struct SerialReference {
  Tensor x, dy;  // the serial input and output gradient
  SerialRun ref;
  std::vector<SerialRun> nudged;
  std::map<std::string, double> terms;
};

// What a serial reference depends on: the model, its input shape (the batch first), its initial parameters and
// buffers, and the check's options (the inputs are made from the shapes with fixed seeds).
std::string reference_key(const Model& m, const std::vector<float>& values, const std::vector<float>& buffers,
                          const ExactnessOptions& check) {
  auto hash = [](const std::vector<float>& v) {
    return std::hash<std::string_view>{}(
        std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  };
  return m.name() + " " + m.input_shape().to_string() + " " + std::to_string(hash(values)) + " " +
         std::to_string(hash(buffers)) + " " + std::to_string(check.calibrate) + " " + std::to_string(check.norm_shift);
}

// Every rank needs every run; run i is computed by rank i % size (each from the same running statistics) and
// broadcast, so the ranks share the work instead of each repeating it. The last reference is kept: consecutive
// checks of one model (other grids, other options) reuse it, as the suites order them.
const SerialReference& serial_reference(const std::function<std::unique_ptr<Model>(std::int64_t)>& build,
                                        std::int64_t batch, const ExactnessOptions& check) {
  static std::string last_key;
  static SerialReference last;
  Communicator& w = world();
  auto serial = build(batch);
  if (check.norm_shift != 0) shift_norms(*serial, check.norm_shift);
  const std::vector<float> buffers_before = serial->parameters().read(Arena::Buffers);
  const std::string key = reference_key(*serial, serial->parameters().read(Arena::Values), buffers_before, check);
  if (key == last_key) return last;
  last_key.clear();
  last = SerialReference{};  // (its memory goes before the next one's is made)
  const Tensor x = random_tensor(serial->input_shape(), 1);
  const Tensor dy = random_tensor(serial->output_shape(), 1000);
  std::vector<Tensor> inputs{x};
  if (check.calibrate)
    for (const auto& [first, factor] :
         {std::pair{std::int64_t{0}, 1.0f + 1e-7f}, std::pair{std::int64_t{3}, 1.0f - 1e-7f}}) {
      Tensor x2 = x.clone();
      for (std::int64_t i = first; i < x2.numel(); i += 7) x2[i] *= factor;
      inputs.push_back(std::move(x2));
    }
  auto root = [&w](std::size_t i) { return static_cast<int>(i % static_cast<std::size_t>(w.size())); };
  const std::size_t gradients = serial->parameters().read(Arena::Gradients).size();
  std::vector<SerialRun> runs(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {  // every rank its own runs first, then all broadcasts
    SerialRun& r = runs[i];
    if (w.rank() == root(i)) {
      serial->parameters().write(Arena::Buffers, buffers_before);
      r = run_serial(*serial, inputs[i], dy);
    } else {
      r.y = Tensor::zeros(serial->output_shape());
      r.dx = Tensor::zeros(serial->input_shape());
      r.gradients.resize(gradients);
      r.buffers.resize(buffers_before.size());
    }
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    SerialRun& r = runs[i];
    const int from = root(i);
    w.broadcast(r.y.data(), static_cast<std::size_t>(r.y.numel()) * sizeof(float), from);
    w.broadcast(r.dx.data(), static_cast<std::size_t>(r.dx.numel()) * sizeof(float), from);
    w.broadcast(r.gradients.data(), r.gradients.size() * sizeof(float), from);
    w.broadcast(r.buffers.data(), r.buffers.size() * sizeof(float), from);
  }
  last.x = x;
  last.dy = dy;
  last.ref = std::move(runs[0]);
  last.nudged.assign(std::make_move_iterator(runs.begin() + 1), std::make_move_iterator(runs.end()));
  last.terms = reduction_terms(*serial, batch);
  last_key = key;
  return last;
}

// The grid's run against a serial reference of batch batch_per_group x grid.samples (expect_exact).
ExactnessReport compare_to(const SerialReference& serial,
                           const std::function<std::unique_ptr<Model>(std::int64_t)>& build,
                           std::int64_t batch_per_group, const GridShape& grid, const DistributedOptions& options,
                           const ExactnessOptions& check) {
  Communicator& w = world();
  const std::int64_t groups = grid.samples;
  auto split = build(batch_per_group);
  if (check.norm_shift != 0) shift_norms(*split, check.norm_shift);
  Backend& b = split->backend();
  const Tensor& x = serial.x;
  const Tensor& dy = serial.dy;
  const SerialRun& ref = serial.ref;
  // The serial run's one-ulp sensitivity of one tensor (0 without calibration): the largest change of the nudged runs.
  auto sensitivity = [&serial](const std::function<double(const SerialRun&)>& change) {
    double worst = 0;
    for (const SerialRun& n : serial.nudged) worst = std::max(worst, change(n));
    return worst;
  };

  // The grid run.
  ProcessGrid pg(w, grid);
  DistributedModel dm(*split, pg, options);
  const std::int64_t first = pg.sample_group() * batch_per_group;
  const Tensor x_group = batch_slice(x, first, batch_per_group, 1.f);
  const Tensor dy_group = batch_slice(dy, first, batch_per_group, static_cast<float>(groups));
  const SpatialBox in_whole = whole_box(x.shape());
  const Tensor y_local =
      b.to_host(dm.forward(b.to_device(slab_of(x_group, in_whole, dm.input_box())), Mode::Train)).clone();
  Tensor dy_local =
      b.to_device(dm.output_split() ? slab_of(dy_group, whole_box(dy.shape()), dm.output_slab()) : dy_group);
  const Tensor dx_local = b.to_host(dm.backward(dy_local)).clone();

  ExactnessReport r;
  // Output and input gradient of this rank's sample group, gathered over its spatial group.
  const Tensor y_group =
      dm.output_split() ? gather_boxes(pg.spatial(), y_local, dm.output_slab(), whole_box(dy.shape())) : y_local;
  const Tensor dx_group = gather_boxes(pg.spatial(), dx_local, dm.input_slab(), in_whole);
  r.output = {"output", error_of(y_group, batch_slice(ref.y, first, batch_per_group, 1.f)),
              sensitivity([&](const SerialRun& n) { return error_of(n.y, ref.y); })};
  r.input_gradient = {"input gradient",
                      error_of(dx_group, batch_slice(ref.dx, first, batch_per_group, static_cast<float>(groups))),
                      sensitivity([&](const SerialRun& n) { return error_of(n.dx, ref.dx); })};
  // Parameter gradients: summed over every rank, divided by the sample groups.
  const ParameterTable& gt = split->parameters();
  std::vector<float> summed = gt.read(Arena::Gradients);
  w.sum(summed.data(), summed.size());
  for (auto& v : summed) v /= static_cast<float>(groups);
  const auto& terms = serial.terms;
  for (const auto& e : gt.parameters()) {
    const auto n = e.shape.numel();
    r.parameters.push_back({e.name, error_of(summed.data() + e.offset, ref.gradients.data() + e.offset, n),
                            sensitivity([&](const SerialRun& s) {
                              return error_of(s.gradients.data() + e.offset, ref.gradients.data() + e.offset, n);
                            }),
                            check.calibrate ? std::sqrt(terms.at(e.name)) * 0x1.0p-24 : 0});
  }
  const std::vector<float> split_buffers = gt.read(Arena::Buffers);
  for (const auto& e : gt.buffers()) {
    const auto n = e.shape.numel();
    r.buffers.push_back({e.name, error_of(split_buffers.data() + e.offset, ref.buffers.data() + e.offset, n),
                         sensitivity([&](const SerialRun& s) {
                           return error_of(s.buffers.data() + e.offset, ref.buffers.data() + e.offset, n);
                         })});
  }
  // The worst over the ranks (each compared its own group and slabs): every error, then the verdict.
  std::vector<TensorError*> all{&r.output, &r.input_gradient};
  for (auto& t : r.parameters) all.push_back(&t);
  for (auto& t : r.buffers) all.push_back(&t);
  std::vector<double> errors;
  for (auto* t : all) errors.push_back(t->error);
  w.max(errors.data(), errors.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    TensorError& t = *all[i];
    t.error = errors[i];
    const double bound = t.bound(check.tolerance);
    if (t.error / bound > r.worst_ratio) {
      r.worst_ratio = t.error / bound;
      r.worst = t.name;
    }
  }
  for (const auto& t : r.parameters) {
    r.worst_parameter_error = std::max(r.worst_parameter_error, t.error);
    r.parameters_above += t.error > check.tolerance;
  }
  return r;
}

}  // namespace

double TensorError::bound(double tolerance) const { return std::max({tolerance, 4 * sensitivity, 4 * accumulation}); }

void print_report(const std::string& what, const GridShape& grid, const ExactnessReport& r) {
  if (world().rank() != 0) return;
  double buffers = 0;
  for (const auto& t : r.buffers) buffers = std::max(buffers, t.error);
  std::printf(
      "exactness %-30s grid %-8s output %.1e  input grad %.1e  param grads: worst %.1e, %d of %zu above 1e-5  "
      "buffers %.1e  | worst error/bound %.2f (%s)\n",
      what.c_str(), grid.to_string().c_str(), r.output.error, r.input_gradient.error, r.worst_parameter_error,
      r.parameters_above, r.parameters.size(), buffers, r.worst_ratio, r.worst.c_str());
  if (r.parameters_above > 0)
    for (const auto& t : r.parameters)
      if (t.error > 1e-5)
        std::printf("    %-40s error %.2e  serial one-ulp sensitivity %.2e  accumulation noise %.2e  bound %.2e\n",
                    t.name.c_str(), t.error, t.sensitivity, t.accumulation, t.bound(1e-5));
  std::fflush(stdout);
}

void expect_exact(const std::string& what, const std::function<std::unique_ptr<Model>(std::int64_t)>& build,
                  std::int64_t batch_per_group, const std::vector<GridShape>& grids, DistributedOptions options,
                  ExactnessOptions check) {
  for (const auto& g : grids) {
    if (g.ranks() != world().size()) continue;
    const std::int64_t batch = batch_per_group * g.samples;
    const auto r = compare_to(serial_reference(build, batch, check), build, batch_per_group, g, options, check);
    print_report(what, g, r);
    EXPECT_LE(r.worst_ratio, 1.0) << what << " " << g.to_string() << ": " << r.worst;
  }
}

}  // namespace fanstore::trainer::testing
