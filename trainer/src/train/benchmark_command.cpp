// --benchmark: timed training and inference steps on synthetic input, no data directory needed.
#include <chrono>
#include <cstdio>
#include <ostream>

#include "trainer/commands.hpp"
#include "trainer/device_selection.hpp"
#include "trainer/input_feed.hpp"
#include "trainer/metrics.hpp"
#include "trainer/models.hpp"
#include "trainer/optim.hpp"
#include "trainer/random.hpp"
#include "trainer/train_loop.hpp"

namespace fanstore::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// A batch of the model's shapes: normal inputs, uniform class labels or regression targets.
data::Batch synthetic_batch(const Model& model, TaskKind task, Rng& rng) {
  const Shape& in = model.input_shape();
  const Shape& outs = model.output_shape();
  data::Batch b;
  b.input_shape = in.dims;
  b.input.resize(static_cast<std::size_t>(in.numel()));
  for (auto& v : b.input) v = static_cast<float>(rng.normal());
  const auto classes = static_cast<std::uint64_t>(outs[1]);
  if (task == TaskKind::Regression) {
    b.target_values.resize(static_cast<std::size_t>(outs.numel()));
    for (auto& v : b.target_values) v = rng.uniform_float(-1.f, 1.f);
  } else {
    const std::int64_t per_sample = task == TaskKind::Segmentation ? outs.spatial_size() : 1;
    b.target_labels.resize(static_cast<std::size_t>(outs.batch() * per_sample));
    for (auto& v : b.target_labels) v = static_cast<std::int32_t>(rng.next_u64() % classes);
  }
  b.sample_indices.resize(static_cast<std::size_t>(in.batch()));
  return b;
}

}  // namespace

ModelOptions benchmark_model_options(const BenchmarkOptions& o) {
  if (o.steps <= 0 || o.batch <= 0) throw std::invalid_argument("--benchmark N and --batch must be positive");
  ModelOptions mo;
  mo.batch = o.batch;
  mo.input_size = o.input_size;
  mo.classes = o.classes;
  mo.seed = o.seed;
  return mo;
}

std::string benchmark_line(double samples, double train_seconds, double inference_seconds, const std::string& device) {
  char line[128];
  std::snprintf(line, sizeof line, "train: %.2f samples/s, inference: %.2f samples/s", samples / train_seconds,
                samples / inference_seconds);
  return line + (", device: " + device);
}

int benchmark_command(const BenchmarkOptions& o, std::ostream& out, std::ostream& err) {
  try {
    const ModelOptions mo = benchmark_model_options(o);
    const TaskKind task = task_for_model(o.model);
    auto model = build_model(
        o.model, make_backend({parse_device_choice(o.device), o.threads, parse_precision(o.precision)}), mo);
    model->set_input_gradient(false);  // as in training
    auto optimizer = make_optimizer(model->parameters(), o.optimizer);
    Rng rng(o.seed);
    data::Batch batch = synthetic_batch(*model, task, rng);
    Backend& backend = model->backend();
    const Tensor x = upload_input(backend, batch);  // as training feeds it: on the CPU a view, not a second copy

    // Details first, on stderr, so the one parsed stdout line is never interleaved with them.
    err << "benchmark: model " << o.model << " input " << model->input_shape().to_string() << " steps " << o.steps
        << " on " << backend.describe() << std::endl;
    auto train_step = [&] {
      Tensor y = model->forward(x, Mode::Train);
      LossResult loss = task_loss(backend, task, y, batch);
      model->backward(loss.gradient);
      optimizer->step(model->parameters(), 1e-4f);
      backend.synchronize();  // a GPU queues work: the step ends when its kernels have run
    };
    train_step();  // warm-up: oneDNN creates its primitives on first use
    auto t0 = Clock::now();
    for (std::int64_t i = 0; i < o.steps; ++i) train_step();
    const double train_s = std::chrono::duration<double>(Clock::now() - t0).count();

    model->forward(x, Mode::Eval);  // warm-up of the inference primitives
    t0 = Clock::now();
    for (std::int64_t i = 0; i < o.steps; ++i) model->forward(x, Mode::Eval);
    backend.synchronize();
    const double infer_s = std::chrono::duration<double>(Clock::now() - t0).count();

    out << benchmark_line(static_cast<double>(o.steps * o.batch), train_s, infer_s, backend.describe()) << std::endl;
    return 0;
  } catch (const std::exception& e) {
    err << "fanstore-train: error: " << error_text(e) << "\n";
    return 1;
  }
}

}  // namespace fanstore::trainer
