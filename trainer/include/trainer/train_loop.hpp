// fanstore-train's training and benchmark commands (the CLI only parses into these options).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "trainer/distributed.hpp"
#include "trainer/distributed_grid.hpp"
#include "trainer/models.hpp"
#include "trainer/optim.hpp"
#include "trainer/tournament.hpp"

namespace fanstore::trainer {

struct TrainOptions {
  std::string model;
  std::string data_dir;        // training samples (this rank reads its shard of them)
  std::string val_dir;         // optional validation samples
  std::string checkpoint_dir;  // checkpoint.bin and (by default) metrics.jsonl; empty = default_run_directory()
  std::string metrics_path;    // empty = CHECKPOINT_DIR/metrics.jsonl
  int epochs = 1;
  std::int64_t batch = 32;   // per sample group: per rank without --grid
  std::optional<double> lr;  // peak learning rate; none = default_learning_rate()
  OptimizerOptions optimizer;
  std::optional<double> warmup_epochs;  // none = default_warmup_epochs()
  std::string schedule = "cosine";      // decay after the warm-up: constant, cosine or poly
  int threads = 0;                      // oneDNN/OpenMP threads (0 = OMP_NUM_THREADS)
  int prefetch_threads = 0;             // 0: sized to the node (decode_threads in run_defaults.hpp)
  std::string device = "auto";          // auto, cpu or cuda (device_selection.hpp)
  std::string precision = "fp32";       // fp32, bf16 or fp16 (precision.hpp); not fp32 needs a GPU
  bool resume = false;
  std::int64_t input_size = 0;  // resnet50 image edge (volumes take theirs from the files)
  std::int64_t classes = 0;
  std::uint64_t seed = 1;
  bool skip_bad_samples = false;
  std::int64_t max_steps = 0;         // stop (with a checkpoint) after this many steps in total; 0 = no limit
  std::int64_t checkpoint_every = 0;  // also checkpoint every N steps; 0 = at epoch ends only
  double bucket_mb = 25;              // gradient allreduce bucket size
  double spike_factor = 10;           // guard: a loss above factor * its running average is a spike (0 = NaN/Inf only)
  std::int64_t inject_nan_at_step = 0;  // testing the guard: poison a weight after this step
  int inject_nan_trainer = -1;          // ... of this trainer only (-1: every trainer)
  bool zero_init_residual = true;       // resnet50: each bottleneck's last BN scale starts at 0 (Goyal et al. 5.1)
  GridOptions grid;                     // sample x spatial grid (docs/parallelism.md); empty = data parallelism
  TournamentOptions tournament;         // --trainers K > 1: tournament training (docs/training.md)
};

// Trains, validates after every epoch, checkpoints, and prints a summary line. The first line on
// `out` says what the run does (model, ranks x batch, optimizer, the learning rate and warm-up it
// chose, schedule) and where its checkpoint and metrics go. Returns the exit code; any error is
// one line on `err` (with the offending file for bad data). A run stopped by signal N at a step's end, with its
// checkpoint (docs/training.md, "Stopping a run"), returns 128 + N.
int train_command(const TrainOptions& options, Communicator& comm, std::ostream& out, std::ostream& err);

struct BenchmarkOptions {
  std::string device = "auto";
  std::string precision = "fp32";
  std::string model;
  std::int64_t steps = 10;
  std::int64_t batch = 32;
  std::int64_t input_size = 0;
  std::int64_t classes = 0;
  int threads = 0;
  std::uint64_t seed = 1;
  OptimizerOptions optimizer;  // --optimizer and its settings: the update each training step makes
};

// Synthetic input, one untimed warm-up step, then `steps` timed training steps (forward, loss,
// backward, the optimizer's update) and `steps` timed inference forwards. Prints exactly one line that scripts parse:
//   train: X samples/s, inference: Y samples/s, device: DESCRIPTION
int benchmark_command(const BenchmarkOptions& options, std::ostream& out, std::ostream& err);

// Shared by benchmark_command and the grid benchmark: the checked model options of a --benchmark run
// (throws std::invalid_argument for a non-positive N or batch), and the one line it prints
// (`device`: Backend::describe()).
ModelOptions benchmark_model_options(const BenchmarkOptions& options);
std::string benchmark_line(double samples, double train_seconds, double inference_seconds, const std::string& device);

}  // namespace fanstore::trainer
