// fanstore-train: parses the command line (CLI11) and calls the trainer library.
#include <malloc.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "cli_common.hpp"

#include "trainer/commands.hpp"
#include "trainer/distributed.hpp"
#include "trainer/distributed_commands.hpp"
#include "trainer/train_loop.hpp"

// CLI11 shows no default for a flag: say it beside the flag.
static std::string default_of(bool on) { return on ? "(default: on)" : "(default: off)"; }

// A finite number of at least `min`: CLI11's NonNegativeNumber lets NaN through (every comparison with it is
// false) and names its range in 300 digits.
static CLI::Validator at_least(double min) {
  std::ostringstream bound;
  bound << min;
  return CLI::Validator(
      [min, b = bound.str()](std::string& text) -> std::string {
        double v = 0;
        if (CLI::detail::lexical_cast(text, v) && std::isfinite(v) && v >= min) return {};
        return "a finite number >= " + b + " is needed, not " + text;
      },
      ">=" + bound.str());
}
static const CLI::Validator kNonNegative = at_least(0), kPositive = at_least(1);

// A thread count: far more threads than any node has cores only exhausts the process (a count of 100000 crashed
// with no message: a segfault in OpenMP, or std::terminate in the prefetcher).
constexpr int kMaxThreads = 1024;
static const CLI::Validator kThreadCount(
    [](std::string& text) -> std::string {
      long long v = -1;
      if (CLI::detail::lexical_cast(text, v) && v >= 0 && v <= kMaxThreads) return {};
      return "a thread count from 0 to " + std::to_string(kMaxThreads) + " is needed, not " + text;
    },
    "0.." + std::to_string(kMaxThreads));

// A seed from 0 to 2^64 - 1, in decimal: CLI11 reads a larger number as 2^64 - 1, and a leading 0 as octal.
static const CLI::Validator kSeed(
    [](std::string& text) -> std::string {
      errno = 0;
      char* end = nullptr;
      const unsigned long long seed = std::strtoull(text.c_str(), &end, 10);
      if (errno != 0 || end == text.c_str() || *end != '\0' || text.find_first_of("-+ \t\n\v\f\r") != std::string::npos)
        return "a seed from 0 to 18446744073709551615 is needed, not " + text;
      text = std::to_string(seed);  // what CLI11 then converts
      return {};
    },
    "0..2^64-1");

int main(int argc, char** argv) {
  using namespace fanstore::trainer;
  CLI::App app{
      "fanstore-train: the FanStore CNN trainer (backends: CPU on oneDNN, CUDA on cuDNN/cuBLASLt/NCCL when built)"};
  app.formatter(std::make_shared<fanstore::cli_common::Formatter>());
  DescribeOptions options;
  TrainOptions train;
  bool describe = false;
  std::int64_t benchmark_steps = 0;
  std::int64_t batch = 0;
  app.add_option("--model", options.model, "Model: resnet50, unet3d or cosmoflow")->required();
  app.add_flag("--describe", describe, "Print the layer table (name, type, output shape, parameters) and the total");
  app.add_option(
         "--input-size", options.model_options.input_size,
         "Spatial edge of the input (0 = model default: resnet50 224, unet3d 128, cosmoflow 128; "
         "cosmoflow training takes it from the files and refuses another; unet3d training reads the centred S x S "
         "window of each slice)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--classes", options.model_options.classes,
                 "Output classes/targets (0 = model default: resnet50 1000, unet3d 3, cosmoflow 4); training "
                 "takes resnet50's from the class directories and cosmoflow's from the targets, and unet3d's labels "
                 "must lie in 0..classes-1")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--batch", batch,
                 "Batch size per sample group: per rank without --grid (0 = 1 for --describe, 32 otherwise)")
      ->capture_default_str()
      ->check(kNonNegative);

  app.add_option("--data", train.data_dir,
                 "Training data directory (resnet50: image folder; cosmoflow, unet3d: HDF5 files)");
  app.add_option("--val", train.val_dir, "Validation data directory (metric after every epoch)");
  app.add_option("--epochs", train.epochs, "Epochs")->capture_default_str()->check(kPositive);
  app.add_option("--lr", train.lr,
                 "Peak learning rate (default: sgd 0.1 x global batch / 256, i.e. x ranks x --batch, as Goyal et al.; "
                 "adam 1e-3; lars needs one)")
      ->check(kNonNegative);
  app.add_option("--optimizer", train.optimizer.kind, "sgd, lars or adam")->capture_default_str();
  app.add_option("--momentum", train.optimizer.momentum, "SGD/LARS momentum")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--weight-decay", train.optimizer.weight_decay, "L2 weight decay (LARS skips BN and biases)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--lars-eta", train.optimizer.lars_eta, "LARS trust coefficient")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--warmup-epochs", train.warmup_epochs,
                 "Linear learning-rate warm-up, in epochs (default: 10% of --epochs, at most 5)")
      ->check(kNonNegative);
  app.add_option("--schedule", train.schedule, "Decay after the warm-up: constant, cosine or poly")
      ->capture_default_str();
  app.add_option("--threads", train.threads, "oneDNN/OpenMP threads (0 = OMP_NUM_THREADS; at most 1024)")
      ->capture_default_str()
      ->check(kThreadCount);
  app.add_option(
         "--device", train.device,
         "auto (CUDA when this build has it and a GPU is present, else the CPU), cpu, or cuda (one GPU per rank, "
         "picked by the node-local rank)")
      ->capture_default_str();
  app.add_option("--precision", train.precision,
                 "fp32, or bf16/fp16 activations with fp32 master weights (CUDA only; fp16 with dynamic loss scaling)")
      ->capture_default_str();
  app.add_option("--prefetch-threads", train.prefetch_threads,
                 "Data decoding threads (0 = sized to the node: 2 on the CPU; on a GPU the rank's share of the "
                 "node's cores less one, 2 to 32; at most 1024)")
      ->capture_default_str()
      ->check(kThreadCount);
  app.add_option("--checkpoint", train.checkpoint_dir,
                 "Checkpoint directory (checkpoint.bin, metrics.jsonl); default: a new run-MODEL-YYYYmmdd-HHMMSS, "
                 "named in the first line of output");
  app.add_flag("--resume", train.resume, "Continue from CHECKPOINT/checkpoint.bin when it exists");
  app.add_option("--seed", train.seed, "Seed of initialisation, shuffle and augmentation")
      ->capture_default_str()
      ->transform(kSeed);
  app.add_option("--metrics", train.metrics_path, "Metrics JSON lines (default CHECKPOINT/metrics.jsonl)");
  app.add_flag("--skip-bad-samples", train.skip_bad_samples,
               "Skip unreadable samples with a counted warning instead of stopping");
  app.add_option("--max-steps", train.max_steps, "Stop with a checkpoint after this many steps in total (0 = none)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--checkpoint-every", train.checkpoint_every, "Also checkpoint every N steps (0 = epoch ends only)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--bucket-mb", train.bucket_mb, "Gradient allreduce bucket size in MB")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--spike-factor", train.spike_factor,
                 "Loss guard: roll back when loss > F x its running average (0 = NaN/Inf only)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--inject-nan-at-step", train.inject_nan_at_step,
                 "Testing: poison one weight after step N (0 = never)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--zero-init-residual", train.zero_init_residual,
                 "resnet50 training: start each residual block's last batch-norm scale at 0, so the network starts "
                 "shallow and the scaled learning rate trains from step 1 (Goyal et al.; false = torchvision's init)")
      ->capture_default_str();
  app.add_option(
         "--benchmark", benchmark_steps,
         "Run N timed steps on synthetic input and print 'train: X samples/s, inference: Y samples/s, device: D'")
      ->check(kNonNegative);
  app.add_option("--grid", train.grid.grid,
                 "Sample x spatial process grid: S,D,H,W (cosmoflow, unet3d) or S,H,W (resnet50), product = ranks; "
                 "auto = pick with the performance model (keeps the global batch --batch x ranks). "
                 "Empty = data parallelism (docs/parallelism.md)");
  app.add_flag("--explain", train.grid.explain,
               "Print the grid's plan per layer (how finely each layer is split, where tensors are "
               "redistributed), then exit; with --grid auto first every candidate grid's predicted step time, "
               "memory and traffic");
  app.add_option("--layer-split", train.grid.layer_split,
                 "With an explicit spatial --grid: split these layers into other parts than the default plan's "
                 "(finest that works), e.g. \"conv_blocks.4.conv=1,1,1;conv_blocks.3.conv=2,1,1\"; each part count "
                 "divides the grid's ranks along its axis (D,H,W or H,W)");
  app.add_option("--auto-trials", train.grid.auto_trials,
                 "With --grid auto: run two training steps on each of the N best-predicted grids (the last of "
                 "them plain data parallelism, when it is not among the best) and choose the fastest measured "
                 "(0 or 1: the performance model's prediction alone)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_flag("--sync-bn", train.grid.sync_bn, "Batch-norm statistics over every rank, not only the spatial group");
  app.add_flag("--halo-overlap,!--no-halo-overlap", train.grid.overlap,
               "Compute the interior of split layers while their halos travel (layers whose input slab outweighs "
               "their weights; with --grid auto, those where the performance model predicts that it pays)")
      ->option_text(default_of(train.grid.overlap));
  app.add_flag("--shard-state,!--no-shard-state", train.grid.shard_state,
               "On a spatial grid: each rank of a spatial group keeps the gradients and optimizer state of, and "
               "updates, only its part of the parameters, then the parts are gathered (ZeRO stage 2)")
      ->option_text(default_of(train.grid.shard_state));
  app.add_flag(
         "--shard-weights,!--no-shard-weights", train.grid.shard_weights,
         "With --shard-state: each rank keeps only its part of the weights as well, and a layer's weights are "
         "gathered over the spatial group while it runs (ZeRO stage 3): less memory where activations, not "
         "one large layer, make the peak; a gather per layer forward and backward; with --grid auto only grids that "
         "split a sample are weighed")
      ->option_text(default_of(train.grid.shard_weights));
  app.add_option("--trainers", train.tournament.trainers,
                 "Tournament training (LTFB): split the ranks into K trainers of ranks/K consecutive ranks each, with "
                 "disjoint data, that meet every --ltfb-interval steps and keep the better model (1 = no tournament)")
      ->capture_default_str();
  app.add_option("--ltfb-interval", train.tournament.interval, "Steps between tournament rounds")
      ->capture_default_str();
  app.add_option("--tournament-fraction", train.tournament.fraction,
                 "Fraction of each trainer's samples held out as its tournament set (rounded up to whole batches)")
      ->capture_default_str();
  app.add_option("--tournament-metric", train.tournament.metric,
                 "Score of a model on a tournament set: loss (lower wins), or the model's metric: accuracy (resnet50), "
                 "dice (unet3d), mae (cosmoflow)")
      ->capture_default_str();
  app.add_option("--ltfb-exchange", train.tournament.exchange,
                 "What partners swap: weights (parameters and batch-norm statistics) or weights+optimizer")
      ->capture_default_str();
  app.add_option(
         "--ltfb-strategy", train.tournament.strategy,
         "pairwise (random pairs, each keeps the better on its own set) or truncation[:K] (the worst K trainers "
         "take the best K's models; K defaults to 1)")
      ->capture_default_str();
  app.add_option("--ltfb-mutate", train.tournament.mutate,
                 "lr or lr=F1,F2,...: a trainer that takes the winner's model also takes its learning rate times one "
                 "of the factors, drawn at random (lr alone = lr=0.8,1.25); default: no mutation");
  app.add_option("--inject-nan-trainer", train.inject_nan_trainer,
                 "Testing: --inject-nan-at-step poisons only this trainer (-1 = every trainer)")
      ->capture_default_str()
      ->check(at_least(-1));
  // One line, as every other error of the trainer, and exit status 1 (CLI11's own are 101-127).
  app.failure_message([argc, argv](const CLI::App* failed, const CLI::Error& e) {
    std::string why = e.what();
    // A misspelt option, not the "--model is required" or the left-over value CLI11 would name.
    if (dynamic_cast<const CLI::RequiredError*>(&e) || dynamic_cast<const CLI::ExtrasError*>(&e))
      if (auto name = fanstore::cli_common::UnknownOption(*failed, 1, argc, argv)) why = "unknown option " + *name;
    if (auto twice = fanstore::cli_common::GivenTwice(why)) why = *twice;
    if (auto value = fanstore::cli_common::NotConverted(why)) why = *value;
    return "fanstore-train: error: " + why + " (--help lists the options)\n";
  });
  // A command line that every rank refuses alike: rank 0 alone says why, and under a launcher no rank leaves before
  // it has (mpirun kills the ranks still running once one exits non-zero, and rank 0's line went with them).
  const auto refuse = [&argc, &argv](const auto& say) {
    auto comm = make_communicator(&argc, &argv);  // MPI only under a launcher
    if (comm->rank() == 0) say();
    double said = 0;
    comm->sum(&said, 1);  // a barrier: rank 0 has written its line
    return 1;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (dynamic_cast<const CLI::Success*>(&e)) return app.exit(e);  // --help
    return refuse([&] { app.exit(e); });
  }

  // Tournament options do nothing without --trainers: refuse them rather than ignore them (rank 0 alone says so).
  // --trainers 1, the plain run, takes them (and ignores them) on purpose.
  if (app.count("--trainers") == 0)
    for (const char* name : {"--ltfb-interval", "--tournament-fraction", "--tournament-metric", "--ltfb-exchange",
                             "--ltfb-strategy", "--ltfb-mutate"})
      if (app.count(name) > 0) {
        return refuse([&] {
          std::cerr << "fanstore-train: error: " << name
                    << " sets up tournament training, which --trainers K (K > 1) turns on: add --trainers, or leave "
                    << name << " out\n";
        });
      }
  // --auto-trials tunes --grid auto's choice: refuse it elsewhere rather than ignore it.
  if (app.count("--auto-trials") > 0 && train.grid.grid != "auto") {
    return refuse([&] {
      std::cerr << "fanstore-train: error: --auto-trials sets how --grid auto chooses its grid: add --grid auto, or "
                   "leave --auto-trials out\n";
    });
  }
  // ResNet-50 alone has residual blocks: refuse the option elsewhere rather than ignore it.
  if (app.count("--zero-init-residual") > 0 && options.model != "resnet50") {
    return refuse([&] {
      std::cerr << "fanstore-train: error: --zero-init-residual sets ResNet-50's residual blocks, which "
                << options.model << " has none: leave it out\n";
    });
  }
  // --describe and a benchmark read and write no files: refuse what they would silently ignore (rank 0 alone
  // says so). --describe builds the model once, on one rank: no grid, tournament or plan either.
  // `given`, then those of `names` on the command line, as "--a, --b".
  const auto given_of = [&app](std::initializer_list<const char*> names, std::string given = {}) {
    for (const char* name : names)
      if (app.count(name) > 0) given += std::string(given.empty() ? "" : ", ") + name;
    return given;
  };
  const std::string given = given_of({"--data", "--val", "--checkpoint", "--metrics", "--resume"});
  const std::string runs = given_of({"--benchmark", "--grid", "--trainers", "--explain"}, given);
  if (describe && !runs.empty()) {
    return refuse([&] {
      std::cerr << "fanstore-train: error: --describe prints the model's layers and runs nothing: drop " << runs
                << "\n";
    });
  }
  if (benchmark_steps > 0 && train.grid.explain) {
    return refuse([&] {
      std::cerr << "fanstore-train: error: --explain prints the grid's plan and exits, so nothing would be timed: "
                   "drop --explain or --benchmark\n";
    });
  }
  if (benchmark_steps > 0 && !given.empty()) {
    return refuse([&] {
      std::cerr << "fanstore-train: error: --benchmark times synthetic batches and reads or writes no files: drop "
                << given << " (to time real data, train with --data DIR --max-steps N)\n";
    });
  }
  if (describe) {
    options.model_options.batch = batch > 0 ? batch : 1;
    return describe_command(options, std::cout, std::cerr);
  }
  const bool on_grid = !train.grid.grid.empty();
  // On a grid memory per rank is the point: map every allocation of 1 MiB or more on its own, so a
  // freed activation goes back to the system at once (glibc otherwise raises this threshold after the
  // first large frees and keeps blocks up to 32 MiB in its heap: +130 MB at the peak of a 2-rank
  // CosmoFlow 128^3 step, docs/parallelism.md).
  if (on_grid) mallopt(M_MMAP_THRESHOLD, 1 << 20);
  if (benchmark_steps > 0 || (train.grid.explain && train.data_dir.empty())) {
    BenchmarkOptions b;
    b.model = options.model;
    b.steps = benchmark_steps;
    b.batch = batch > 0 ? batch : 32;
    b.input_size = options.model_options.input_size;
    b.classes = options.model_options.classes;
    b.threads = train.threads;
    b.device = train.device;
    b.precision = train.precision;
    b.seed = train.seed;
    b.optimizer = train.optimizer;
    auto comm = make_communicator(&argc, &argv);
    // One rank without a grid: no MPI at all. On a grid, on several ranks (plain data parallelism over them all,
    // one line of global throughput), or --explain without data (the shapes come from --input-size): the grid's.
    if (!on_grid && !train.grid.explain && comm->size() == 1) {
      // As on several ranks (grid_benchmark_command): one process is one grid, not a tournament.
      if (train.tournament.trainers != 1) {
        std::cerr << "fanstore-train: error: --benchmark times one grid, not a tournament: leave out --trainers "
                  << train.tournament.trainers << "\n";
        return 1;
      }
      return benchmark_command(b, std::cout, std::cerr);
    }
    if (b.steps <= 0) b.steps = 1;
    return grid_benchmark_command(b, train.grid, train.tournament, *comm, std::cout, std::cerr);
  }
  if (train.data_dir.empty())
    return refuse([] {
      std::cerr << "fanstore-train: error: nothing to do; pass --describe, --benchmark N, or --data DIR to train\n";
    });
  train.model = options.model;
  train.batch = batch > 0 ? batch : 32;
  train.input_size = options.model_options.input_size;
  train.classes = options.model_options.classes;
  auto comm = make_communicator(&argc, &argv);
  const int status = train_command(train, *comm, std::cout, std::cerr);
  comm.reset();  // MPI_Finalize
  // A run stopped by a signal, its checkpoint written, dies of that signal, as a shell or a batch system expects
  // (a shell's loop stops on Ctrl-C only for a child that died of SIGINT).
  if (status > 128) {
    std::cout.flush();
    std::signal(status - 128, SIG_DFL);
    std::raise(status - 128);
  }
  return status;
}
