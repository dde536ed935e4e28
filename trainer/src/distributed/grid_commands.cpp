// --grid resolution (explicit, auto with the performance model, or data parallelism) and --benchmark
// on a grid.
#include "trainer/commands.hpp"
#include "trainer/distributed_commands.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <ostream>
#include <sstream>

#include "trainer/device_selection.hpp"
#include "trainer/distributed_perf_model.hpp"
#include "trainer/distributed_run.hpp"
#include "trainer/input_feed.hpp"
#include "trainer/metrics.hpp"
#include "trainer/optim.hpp"
#include "trainer/random.hpp"
#include "trainer/tournament.hpp"

namespace fanstore::trainer {
namespace {

using Clock = std::chrono::steady_clock;

int spatial_rank_of(const std::string& model) { return model == "resnet50" ? 2 : 3; }

// This rank's synthetic batch: its input box of random values, and targets the same on every rank of
// the sample group (replicated outputs) or for its output slab (segmentation).
data::Batch synthetic_slab_batch(const GridRun& run, int rank, TaskKind task, std::uint64_t seed) {
  Rng shared(seed);
  Rng mine(seed + 1000003u * static_cast<std::uint64_t>(rank + 1));
  data::Batch b;
  const Shape in = run.local_input_shape();
  b.input_shape = in.dims;
  b.input.resize(static_cast<std::size_t>(in.numel()));
  for (auto& v : b.input) v = static_cast<float>(mine.normal());
  const Shape out = run.local_output_shape();
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
  const std::string line = "fanstore-train: error: " + error_text(error) + "\n";
  err.write(line.data(), static_cast<std::streamsize>(line.size()));
  err.flush();
}

// Training steps of one rank on a grid with synthetic slab input, through the training loop's GridRun: what
// --benchmark times, and what --grid auto tries for its best predictions.
class GridSteps {
 public:
  GridSteps(const std::string& model_name, ModelOptions mo, std::shared_ptr<Backend> backend,
            const ResolvedGrid& resolved, const GridOptions& g, const OptimizerOptions& optimizer, std::uint64_t seed,
            Communicator& world)
      : world_(world), task_(task_for_model(model_name)) {
    // A model that cannot take the input is the same error on every rank: one line for all.
    model_ = agree_on_errors(world, [&] { return build_model(model_name, std::move(backend), mo); });
    // A CUDA run's halos and gradient buckets are device memory: over NCCL (docs/gpu.md).
    nccl_ = make_device_communicator(world, model_->backend());
    run_ = std::make_unique<GridRun>(*model_, nccl_ ? *nccl_ : world, resolved, g);
    optimizer_ = make_optimizer(model_->parameters(), optimizer);
    run_->shard(*optimizer_);
    gradients_ = run_->make_gradient_reduction(*optimizer_, 25u << 20);
    run_->set_gradient_ready_hook([this](const Layer& layer) { gradients_->on_layer_ready(layer); });
    batch_ = synthetic_slab_batch(*run_, world.rank(), task_, seed);
    x_ = upload_input(model_->backend(), batch_);  // as training feeds it: on the CPU a view, not a second copy
  }

  const GridRun& run() const { return *run_; }
  Backend& backend() { return model_->backend(); }

  void train_step() {
    model_->set_step(step_++);
    Tensor y = run_->forward(x_, Mode::Train);
    LossResult loss = run_->loss(task_, y, batch_);
    gradients_->begin_step();
    run_->backward(loss.gradient);
    gradients_->finish();
    optimizer_->step(model_->parameters(), 1e-4f);
  }
  void infer_step() { run_->forward(x_, Mode::Eval); }

  // Seconds for n calls of `step` on the slowest rank: every rank's queued kernels done (a GPU runs
  // asynchronously) and every rank here, before and after.
  template <typename Step>
  double time(std::int64_t n, Step step) {
    barrier();
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < n; ++i) step();
    barrier();
    double seconds[1] = {std::chrono::duration<double>(Clock::now() - t0).count()};
    world_.max(seconds, 1);
    return seconds[0];
  }

 private:
  void barrier() {
    model_->backend().synchronize();
    double sync[1] = {0};
    world_.sum(sync, 1);
  }

  Communicator& world_;
  TaskKind task_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Communicator> nccl_;
  std::unique_ptr<GridRun> run_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<GradientReduction> gradients_;
  data::Batch batch_;
  Tensor x_;
  std::uint64_t step_ = 0;
};

}  // namespace

void report_grid_error(const GridError& error, Communicator& world, std::ostream& err) {
  if (world.rank() == 0) write_error_line(error, err);
  double done[1] = {0};
  world.max(done, 1);
}

int report_error_and_abort(const std::exception& error, Communicator& world, std::ostream& err) {
  write_error_line(error, err);
  if (world.size() > 1) world.abort(1);
  return 1;
}

void agree_on_failure(Communicator& world, const std::exception* error) {
  // The lowest failed rank r as size - r (0: none failed), so that the maximum names it.
  double failed[1] = {error ? static_cast<double>(world.size() - world.rank()) : 0.0};
  world.max(failed, 1);
  if (failed[0] == 0) return;
  const int from = world.size() - static_cast<int>(failed[0]);
  std::string message = world.rank() == from ? error_text(*error) : std::string();
  broadcast_string(world, message, from);
  throw GridError(message);
}

void broadcast_string(Communicator& world, std::string& text, int root) {
  std::uint64_t length = text.size();
  world.broadcast(&length, sizeof length, root);
  text.resize(static_cast<std::size_t>(length));
  world.broadcast(text.data(), text.size(), root);
}

void check_trainer_grid(const GridOptions& g, const std::string& model_name, int trainers, int trainer_ranks) {
  if (g.grid.empty() || g.grid == "auto") return;
  const GridShape shape = parse_grid(g.grid, spatial_rank_of(model_name));
  if (trainers > 1 && shape.ranks() != trainer_ranks)
    throw GridError("--grid " + shape.to_string() + " needs " + std::to_string(shape.ranks()) +
                    " ranks, but each of the " + std::to_string(trainers) + " trainers has " +
                    std::to_string(trainer_ranks) + ": pass a grid whose product is " + std::to_string(trainer_ranks) +
                    " (ranks / --trainers)");
  check_grid_ranks(shape, trainer_ranks);
}

ResolvedGrid resolve_grid(const GridOptions& g, const std::string& model_name, ModelOptions mo, int threads,
                          const OptimizerOptions& optimizer, Device device, Communicator& world, std::ostream& out,
                          std::ostream& err) {
  const int ranks = world.size(), spatial_rank = spatial_rank_of(model_name);
  if (g.shard_weights && !g.shard_state)
    throw GridError("--shard-weights shards the weights on top of the sharded state: leave out --no-shard-state");
  // The plan per layer of `shape` (--explain), from a CPU instance of the model at this batch.
  auto print_plan = [&](const GridShape& shape, std::int64_t batch) {
    ModelOptions plan_options = mo;
    plan_options.batch = batch;
    const std::string table = agree_on_errors(world, [&] {
      auto m = build_model(model_name, make_cpu_backend({threads}), plan_options);
      return SpatialPlan(*m, shape, distributed_options(g, spatial_rank).layer_splits).describe(*m);
    });
    if (world.rank() == 0) out << table << std::flush;
  };
  if (g.grid.empty()) {
    if (g.explain) throw GridError("--explain goes with --grid (auto, or S,D,H,W / S,H,W)");
    if (!g.layer_split.empty()) throw GridError("--layer-split goes with a spatial --grid");
    if (g.shard_weights) throw GridError("--shard-weights goes with a spatial --grid (it shards over a spatial group)");
    return {data_parallel_grid(ranks, spatial_rank), mo.batch, {}};
  }
  if (g.grid != "auto") {
    GridShape shape = parse_grid(g.grid, spatial_rank);
    check_grid_ranks(shape, ranks);
    if (g.shard_weights && !shape.spatially_split())
      throw GridError("--shard-weights goes with a spatial --grid (it shards over a spatial group); " +
                      shape.to_string() + " splits no sample");
    if (!g.layer_split.empty() && !shape.spatially_split())
      throw GridError("--layer-split goes with a spatial --grid; " + shape.to_string() + " splits no sample");
    if (g.explain) print_plan(shape, mo.batch);
    return {shape, mo.batch, {}};
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
  po.sync_bn = g.sync_bn;
  po.overlap = g.overlap;
  po.shard_state = g.shard_state;
  po.shard_weights = g.shard_weights;
  po.base_memory_bytes = peak_rss_bytes();  // predict_grids takes the most over the ranks
  mo.batch = 1;                             // the timing model's layers run on each grid's slab shapes and batch
  auto timing = agree_on_errors(world, [&] { return build_model(model_name, make_cpu_backend({threads}), mo); });
  timing->set_input_gradient(false);  // its layers are timed as training runs them
  {
    // What the optimizer keeps per parameter and how it cuts its sharded parts, from the optimizer itself, built on
    // no parameters: on the model's it would allocate its whole state only to be counted.
    ParameterTable none;
    none.finalize(timing->backend());
    const auto opt = make_optimizer(none, optimizer);
    po.optimizer_states = static_cast<int>(opt->state().size());
    po.whole_tensor_parts = opt->needs_whole_tensors();
  }
  // --shard-weights shards over a spatial group, so with it auto weighs only the grids that split a sample
  // (as an explicit grid that splits none is refused), never silently dropping it for plain data parallelism.
  std::vector<GridShape> candidates = candidate_grids(ranks, spatial_rank);
  if (g.shard_weights) {
    std::erase_if(candidates, [](const GridShape& c) { return !c.spatially_split(); });
    if (candidates.empty())
      throw GridError("--grid auto --shard-weights: no grid of " +
                      (ranks == 1 ? std::string("one rank") : std::to_string(ranks) + " ranks") +
                      " splits a sample, and --shard-weights shards over a spatial group: start more ranks "
                      "or leave out --shard-weights");
  }
  const MachineCosts costs = measure_machine_costs(world);
  auto predictions = predict_grids(*timing, candidates, po, costs, world);
  timing.reset();
  int best = best_grid(predictions);
  // What the model cannot see (each kernel's speed in the run's layouts, boundary pieces, the MPI
  // progress of oversubscribed ranks) is measured: the best predictions, and plain data parallelism
  // (the grid without a split, whose per-layer timings the model overestimates most), run a warm-up and
  // three training steps each, and the one whose fastest step is fastest is chosen.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < predictions.size(); ++i)
    if (predictions[i].invalid.empty()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return predictions[a].step_s < predictions[b].step_s; });
  const auto trials = static_cast<std::size_t>(std::max(g.auto_trials, 0));
  if (order.size() > trials) {
    const auto plain =
        std::find_if(order.begin(), order.end(), [&](std::size_t i) { return !predictions[i].grid.spatially_split(); });
    if (trials > 1 && plain != order.end() && plain - order.begin() >= static_cast<std::ptrdiff_t>(trials))
      std::iter_swap(order.begin() + static_cast<std::ptrdiff_t>(trials) - 1, plain);
    order.resize(trials);
  }
  if (order.size() > 1) {
    best = static_cast<int>(order[0]);
    for (std::size_t i : order) {
      GridPrediction& p = predictions[i];
      ModelOptions trial = mo;
      trial.batch = p.batch_per_group;
      // From no kept blocks, as the run starts: those kept from the timed layers or an earlier trial would spare
      // the trial the page faults that the run pays every step.
      Storage::release_kept_host();
      GridSteps steps(model_name, trial, make_cpu_backend({threads}), {p.grid, p.batch_per_group, p.one_kernel_layers},
                      g, optimizer, 1, world);
      steps.train_step();
      // Its fastest of three steps: a step that other load on the machine slowed says little of the grid.
      p.measured_s = std::numeric_limits<double>::infinity();
      for (int k = 0; k < 3; ++k) p.measured_s = std::min(p.measured_s, steps.time(1, [&] { steps.train_step(); }));
      if (p.measured_s < predictions[static_cast<std::size_t>(best)].measured_s) best = static_cast<int>(i);
    }
  }
  if (world.rank() == 0 && g.explain) out << explain_table(predictions, costs, best) << std::flush;
  if (g.explain && best >= 0) {
    const GridPrediction& chosen = predictions[static_cast<std::size_t>(best)];
    print_plan(chosen.grid, chosen.batch_per_group);
    if (world.rank() == 0 && !chosen.one_kernel_layers.empty()) {
      out << "one kernel after the halo (its pieces predicted slower than the overlap saves):";
      for (const auto& name : chosen.one_kernel_layers) out << " " << name;
      out << "\n" << std::flush;
    }
  }
  if (best < 0)
    throw GridError("--grid auto: no grid of " + std::to_string(ranks) + " ranks can run " + model_name +
                    " with a global batch of " + std::to_string(po.global_batch) + " (--explain says why for each)");
  Storage::release_kept_host();  // the timed layers' and the trials' tensors, of other shapes than the run's
  const GridPrediction& p = predictions[static_cast<std::size_t>(best)];
  if (world.rank() == 0) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << "fanstore-train: --grid auto chose " << p.grid.to_string() << " (batch "
      << p.batch_per_group << " per sample group, global " << po.global_batch << "): predicted " << p.step_s * 1e3
      << " ms per step";
    if (p.measured_s > 0)
      s << ", measured " << p.measured_s * 1e3 << " ms (the fastest of the " << order.size() << " tried)";
    s << ", " << p.memory_bytes / (1 << 20) << " MiB per rank\n";
    err << s.str() << std::flush;
  }
  return {p.grid, p.batch_per_group, p.one_kernel_layers};
}

int grid_benchmark_command(const BenchmarkOptions& o, const GridOptions& g, const TournamentOptions& t,
                           Communicator& world, std::ostream& out, std::ostream& err) {
  try {
    // Every option every rank checks alike, before any collective: one line from rank 0 for all.
    const TournamentPlan plan = agree_on_errors(world, [&] {
      const TournamentPlan p = parse_tournament(t, task_for_model(o.model), world.size());
      if (p.enabled() && !g.explain)
        throw GridError("--benchmark times one grid, not a tournament: leave out --trainers " +
                        std::to_string(p.trainers) + " and start the " + std::to_string(p.ranks_per_trainer) +
                        " ranks of one trainer");
      check_trainer_grid(g, o.model, p.trainers, p.ranks_per_trainer);
      return p;
    });
    auto [mo, backend] = agree_on_errors(world, [&] {
      ModelOptions m = benchmark_model_options(o);
      auto b = make_backend({parse_device_choice(o.device), o.threads, parse_precision(o.precision)});
      return std::pair{m, std::move(b)};
    });
    // --explain with --trainers K plans each trainer's grid on its ranks, as training does; trainer 0 talks.
    std::unique_ptr<Communicator> trainer_comm;
    if (plan.enabled()) trainer_comm = world.split(plan.trainer_of(world.rank()), world.rank());
    Communicator& comm = trainer_comm ? *trainer_comm : world;
    std::ostream quiet(nullptr);
    const bool talks = plan.trainer_of(world.rank()) == 0;
    const ResolvedGrid resolved = resolve_grid(g, o.model, mo, o.threads, o.optimizer, backend->device(), comm,
                                               talks ? out : quiet, talks ? err : quiet);
    if (g.explain) return 0;
    mo.batch = resolved.batch_per_group;
    GridSteps steps(o.model, mo, std::move(backend), resolved, g, o.optimizer, o.seed, world);
    if (world.rank() == 0)
      err << "benchmark: model " << o.model << " grid " << resolved.shape.to_string() << " batch per group "
          << resolved.batch_per_group << " slab input " << steps.run().local_input_shape().to_string() << " steps "
          << o.steps << " threads " << (o.threads > 0 ? std::to_string(o.threads) : std::string("default"))
          << std::endl;
    steps.train_step();  // warm-up: the backend creates its primitives on first use
    const double train_s = steps.time(o.steps, [&] { steps.train_step(); });
    steps.infer_step();
    const double infer_s = steps.time(o.steps, [&] { steps.infer_step(); });
    Backend& b = steps.backend();

    double peak[3] = {peak_rss_bytes(), peak_virtual_bytes(), static_cast<double>(Storage::host_peak_bytes())};
    world.max(peak, 3);
    const double samples = static_cast<double>(o.steps * resolved.batch_per_group * resolved.shape.samples);
    if (world.rank() == 0) {
      // One write: std::cerr is unbuffered, and under mpirun a line written in pieces can be split by the stdout
      // line below (the bench's parser then missed the step time).
      std::ostringstream line;
      line << "benchmark: step " << std::fixed << std::setprecision(1) << train_s / static_cast<double>(o.steps) * 1e3
           << " ms, peak_rss_bytes " << std::setprecision(0) << peak[0] << " peak_virtual_bytes " << peak[1]
           << " peak_tensor_bytes " << peak[2] << " (max over " << world.size() << " ranks)\n";
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
