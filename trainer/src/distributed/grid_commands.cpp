// --grid resolution (explicit, auto with the performance model, or data parallelism) and --benchmark
// on a grid.
#include "trainer/distributed_commands.hpp"

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "trainer/device_selection.hpp"
#include "trainer/distributed_losses.hpp"
#include "trainer/distributed_model.hpp"
#include "trainer/distributed_perf_model.hpp"
#include "trainer/metrics.hpp"
#include "trainer/optim.hpp"
#include "trainer/random.hpp"

namespace fanstore::trainer {
namespace {

using Clock = std::chrono::steady_clock;

int spatial_rank_of(const std::string& model) { return model == "resnet50" ? 2 : 3; }

// This rank's synthetic batch: its input box of random values, and targets the same on every rank of
// the sample group (replicated outputs) or for its output slab (segmentation).
data::Batch synthetic_slab_batch(const DistributedModel& dm, TaskKind task, std::uint64_t seed) {
  Rng shared(seed);
  Rng mine(seed + 1000003u * static_cast<std::uint64_t>(const_cast<DistributedModel&>(dm).grid().world().rank() + 1));
  data::Batch b;
  const Shape& in = dm.local_input_shape();
  b.input_shape = in.dims;
  b.input.resize(static_cast<std::size_t>(in.numel()));
  for (auto& v : b.input) v = static_cast<float>(mine.normal());
  const Shape out = dm.local_output_shape();
  const auto classes = static_cast<std::uint64_t>(out[1]);
  if (task == TaskKind::Regression) {
    b.target_values.resize(static_cast<std::size_t>(out.numel()));
    for (auto& v : b.target_values) v = shared.uniform_float(-1.f, 1.f);
  } else {
    const std::int64_t per_sample = task == TaskKind::Segmentation ? out.spatial_size() : 1;
    b.target_labels.resize(static_cast<std::size_t>(out[0] * per_sample));
    Rng& labels = task == TaskKind::Segmentation ? mine : shared;
    for (auto& v : b.target_labels) v = static_cast<std::int32_t>(labels.next_u64() % classes);
  }
  b.sample_indices.resize(static_cast<std::size_t>(in[0]));
  return b;
}

// One write, so the lines of several ranks do not interleave.
void write_error_line(const std::exception& error, std::ostream& err) {
  const std::string line = std::string("fanstore-train: error: ") + error.what() + "\n";
  err.write(line.data(), static_cast<std::streamsize>(line.size()));
  err.flush();
}

}  // namespace

void report_grid_error(const GridError& error, Communicator& world, std::ostream& err) {
  write_error_line(error, err);
  double done[1] = {0};
  world.max(done, 1);
}

int report_error_and_abort(const std::exception& error, Communicator& world, std::ostream& err) {
  write_error_line(error, err);
  if (world.size() > 1) world.abort(1);
  return 1;
}

ResolvedGrid resolve_grid(const GridOptions& g, const std::string& model_name, ModelOptions mo, int threads,
                          int optimizer_states, Device device, Communicator& world, std::ostream& out,
                          std::ostream& err) {
  const int ranks = world.size(), spatial_rank = spatial_rank_of(model_name);
  // The plan per layer of `shape` (--explain), from a CPU instance of the model at this batch.
  auto print_plan = [&](const GridShape& shape, std::int64_t batch) {
    ModelOptions plan_options = mo;
    plan_options.batch = batch;
    auto m = build_model(model_name, make_cpu_backend({threads}), plan_options);
    const SpatialPlan plan(*m, shape, distributed_options(g, spatial_rank).layer_splits);
    if (world.rank() == 0) out << plan.describe(*m) << std::flush;
  };
  if (g.grid.empty()) {
    if (g.explain) throw GridError("--explain goes with --grid (auto, or S,D,H,W / S,H,W)");
    if (!g.layer_split.empty()) throw GridError("--layer-split goes with a spatial --grid");
    return {data_parallel_grid(ranks, spatial_rank), mo.batch};
  }
  if (g.grid != "auto") {
    GridShape shape = parse_grid(g.grid, spatial_rank);
    check_grid_ranks(shape, ranks);
    if (g.explain) print_plan(shape, mo.batch);
    return {shape, mo.batch};
  }
  if (!g.layer_split.empty())
    throw GridError("--layer-split goes with an explicit --grid (--grid auto plans every layer itself)");
  if (device != Device::Host)
    throw GridError(
        "--grid auto measures the CPU backend's layers and MPI, not a GPU: with --device cuda pass an "
        "explicit --grid (e.g. " +
        std::string(spatial_rank == 3 ? "1,2,1,1" : "1,2,1") + "), or use --device cpu");
  PerformanceModelOptions po;
  po.global_batch = mo.batch * ranks;
  po.optimizer_states = optimizer_states;
  po.sync_bn = g.sync_bn;
  po.overlap = g.overlap;
  po.shard_state = g.shard_state;
  po.base_memory_bytes = peak_rss_bytes();
  double base[1] = {po.base_memory_bytes};
  world.max(base, 1);
  po.base_memory_bytes = base[0];
  mo.batch = 1;  // the timing model's layers run on each grid's slab shapes and batch
  auto timing = build_model(model_name, make_cpu_backend({threads}), mo);
  const MachineCosts costs = measure_machine_costs(world);
  const auto predictions = predict_grids(*timing, candidate_grids(ranks, spatial_rank), po, costs, world);
  const int best = best_grid(predictions);
  if (world.rank() == 0 && g.explain) out << explain_table(predictions, costs, best) << std::flush;
  if (g.explain && best >= 0) {
    const GridPrediction& chosen = predictions[static_cast<std::size_t>(best)];
    print_plan(chosen.grid, chosen.batch_per_group);
  }
  if (best < 0)
    throw GridError("--grid auto: no grid of " + std::to_string(ranks) + " ranks can run " + model_name +
                    " with a global batch of " + std::to_string(po.global_batch) + " (--explain says why for each)");
  const GridPrediction& p = predictions[static_cast<std::size_t>(best)];
  if (world.rank() == 0) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << "fanstore-train: --grid auto chose " << p.grid.to_string() << " (batch "
      << p.batch_per_group << " per sample group, global " << po.global_batch << "): predicted " << p.step_s * 1e3
      << " ms per step, " << p.memory_bytes / (1 << 20) << " MiB per rank\n";
    err << s.str() << std::flush;
  }
  return {p.grid, p.batch_per_group};
}

int grid_benchmark_command(const BenchmarkOptions& o, const GridOptions& g, Communicator& world, std::ostream& out,
                           std::ostream& err) {
  try {
    ModelOptions mo = benchmark_model_options(o);
    const TaskKind task = task_for_model(o.model);
    auto backend = make_backend({parse_device_choice(o.device), o.threads, parse_precision(o.precision)});
    const ResolvedGrid resolved = resolve_grid(g, o.model, mo, o.threads, 1, backend->device(), world, out, err);
    if (g.explain) return 0;
    mo.batch = resolved.batch_per_group;
    auto model = build_model(o.model, std::move(backend), mo);
    // A CUDA run's halos and gradient buckets are device memory: over NCCL (docs/gpu.md).
    const auto nccl = make_device_communicator(world, model->backend());
    Communicator& device_world = nccl ? *nccl : world;
    ProcessGrid grid(device_world, resolved.shape);
    DistributedModel dm(*model, grid, distributed_options(g, model->input_shape().spatial_rank()));
    auto optimizer = make_sgd(model->parameters(), OptimizerOptions{});
    if (g.shard_state) optimizer->shard_over(grid.spatial());
    GradientAllreduce allreduce(device_world, model->parameters(), 25u << 20,
                                static_cast<std::size_t>(resolved.shape.samples));
    dm.set_gradient_ready_hook([&](const Layer& layer) { allreduce.on_layer_ready(layer); });
    const data::Batch batch = synthetic_slab_batch(dm, task, o.seed);
    Tensor host = Tensor::zeros(dm.local_input_shape());
    std::copy(batch.input.begin(), batch.input.end(), host.data());
    const Tensor x = model->backend().to_device(host);

    if (world.rank() == 0)
      err << "benchmark: model " << o.model << " grid " << resolved.shape.to_string() << " batch per group "
          << resolved.batch_per_group << " slab input " << dm.local_input_shape().to_string() << " steps " << o.steps
          << " threads " << (o.threads > 0 ? std::to_string(o.threads) : std::string("default")) << std::endl;
    std::uint64_t step = 0;
    auto train_step = [&] {
      model->set_step(step++);
      Tensor y = dm.forward(x, Mode::Train);
      LossResult loss = grid_task_loss(task, dm, y, batch);
      allreduce.begin_step();
      dm.backward(loss.gradient);
      allreduce.finish();
      optimizer->step(model->parameters(), 1e-4f);
    };
    Backend& b = model->backend();
    train_step();  // warm-up: the backend creates its primitives on first use
    double sync[1] = {0};
    // Every rank's queued kernels done (a GPU runs asynchronously), then every rank here.
    auto barrier = [&] {
      b.synchronize();
      world.sum(sync, 1);
    };
    barrier();
    auto t0 = Clock::now();
    for (std::int64_t i = 0; i < o.steps; ++i) train_step();
    barrier();
    const double train_s = std::chrono::duration<double>(Clock::now() - t0).count();
    dm.forward(x, Mode::Eval);
    barrier();
    t0 = Clock::now();
    for (std::int64_t i = 0; i < o.steps; ++i) dm.forward(x, Mode::Eval);
    barrier();
    const double infer_s = std::chrono::duration<double>(Clock::now() - t0).count();

    double peak[2] = {peak_rss_bytes(), peak_virtual_bytes()};
    world.max(peak, 2);
    const double samples = static_cast<double>(o.steps * resolved.batch_per_group * resolved.shape.samples);
    if (world.rank() == 0) {
      // One write: std::cerr is unbuffered, and under mpirun a line written in pieces can be split by the stdout
      // line below (the bench's parser then missed the step time).
      std::ostringstream line;
      line << "benchmark: step " << std::fixed << std::setprecision(1) << train_s / static_cast<double>(o.steps) * 1e3
           << " ms, peak_rss_bytes " << std::setprecision(0) << peak[0] << " peak_virtual_bytes " << peak[1]
           << " (max over " << world.size() << " ranks)\n";
      err << line.str() << std::flush;
      out << benchmark_line(samples, train_s, infer_s, b.describe()) << std::endl;
    }
    return 0;
  } catch (const GridError& e) {
    report_grid_error(e, world, err);  // every rank found it
    return 1;
  } catch (const std::exception& e) {
    return report_error_and_abort(e, world, err);
  }
}

}  // namespace fanstore::trainer
