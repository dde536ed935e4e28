// The training loop: sharded prefetched batches, forward/loss/backward with overlapped gradient
// allreduce, scheduled optimizer steps, the loss guard, validation, checkpoints and metrics.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <numeric>
#include <optional>
#include <ostream>
#include <sstream>
#include <string_view>
#include <utility>

#include "metrics_log.hpp"
#include "stop_signals.hpp"
#include "tournament_run.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/data/batch_loader.hpp"
#include "trainer/data/daemon_hint.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/prefetcher.hpp"
#include "trainer/data/shard.hpp"
#include "trainer/device_selection.hpp"
#include "trainer/distributed_commands.hpp"
#include "trainer/distributed_perf_model.hpp"
#include "trainer/distributed_run.hpp"
#include "trainer/input_feed.hpp"
#include "trainer/loss_guard.hpp"
#include "trainer/metrics.hpp"
#include "trainer/run_defaults.hpp"
#include "trainer/schedule.hpp"
#include "trainer/train_data.hpp"
#include "trainer/train_loop.hpp"

namespace fanstore::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Validation {
  double metric = std::numeric_limits<double>::quiet_NaN();
  double loss = std::numeric_limits<double>::quiet_NaN();      // with_loss: the mean of the batches' losses
  double baseline = std::numeric_limits<double>::quiet_NaN();  // MAE of predicting the mean (regression)
  std::size_t samples = 0;
  std::uint64_t bad_samples = 0;  // skipped (skip_bad)
};

// Every sample group evaluates its strided share of the validation set (in order, padded to full
// batches because the model has a fixed batch); padding positions are left out of the sums, and a
// group's samples count once however many spatial ranks share them. `with_loss` also averages the
// batches' losses, exact when the set is whole batches (a tournament set). With `skip_bad` (--skip-bad-samples)
// a bad sample's slot takes its batch neighbour's copy, which the sums then count twice.
Validation validate(GridRun& run, Backend& backend, const data::SampleDataset& dataset, TaskKind task,
                    Communicator& comm, std::int64_t batch, int prefetch_threads, bool skip_bad,
                    bool with_loss = false) {
  data::ShardSpec spec;
  spec.dataset_size = dataset.size();
  spec.batch_size = static_cast<std::size_t>(batch);
  spec.rank = static_cast<std::size_t>(run.sample_group());
  spec.world_size = static_cast<std::size_t>(run.sample_groups());
  spec.shuffle = false;
  spec.last_batch = data::LastBatch::kPad;
  const auto shard = data::shard_indices(spec);
  data::BatchLoader loader(dataset, {.skip_bad_samples = skip_bad, .input_memory = backend.input_memory()});
  data::Prefetcher prefetcher(loader, data::split_into_batches(shard, spec.batch_size), 0, {prefetch_threads, 4});
  MetricSums sums;
  std::vector<float> targets;  // regression: kept for the predict-the-mean baseline
  std::size_t position = 0;
  double losses[2] = {0, 0};  // sum over batches and ranks, count
  while (auto b = prefetcher.next()) {
    std::size_t valid = 0;
    for (std::size_t k = 0; k < b->sample_indices.size(); ++k)
      if ((position + k) * spec.world_size + spec.rank < dataset.size()) ++valid;
    position += b->sample_indices.size();
    const Tensor y = run.forward(upload_input(backend, *b), Mode::Eval);
    if (with_loss) {
      losses[0] += run.loss(task, y, *b).loss;
      losses[1] += 1;
    }
    run.accumulate_metric(task, y, *b, valid, sums);
    if (task == TaskKind::Regression && run.counts_for_group()) {
      const std::size_t per = b->target_values.size() / b->sample_indices.size();
      targets.insert(targets.end(), b->target_values.begin(),
                     b->target_values.begin() + static_cast<std::ptrdiff_t>(valid * per));
    }
    backend.synchronize();  // the upload read b's memory, which goes back to the prefetch threads now
  }
  double totals[2] = {sums.sum, sums.count};
  comm.sum(totals, 2);
  Validation v;
  v.metric = totals[1] > 0 ? totals[0] / totals[1] : v.metric;
  if (with_loss) {
    comm.sum(losses, 2);
    v.loss = losses[1] > 0 ? losses[0] / losses[1] : v.loss;
  }
  v.samples = dataset.size();
  v.bad_samples = loader.bad_sample_count();
  if (task == TaskKind::Regression) {
    // Baseline: always predict the mean validation target, each target (parameter) its own mean; the MAE over all
    // target values, as the metric's.
    std::size_t per = 1;
    for (auto d : dataset.layout().target_shape) per *= static_cast<std::size_t>(d);
    std::vector<double> sums(per + 1, 0.0);  // per target, then the number of samples
    for (std::size_t i = 0; i < targets.size(); ++i) sums[i % per] += targets[i];
    sums[per] = static_cast<double>(targets.size() / per);
    comm.sum(sums.data(), sums.size());
    const double n = sums[per];
    double dev[1] = {0};
    for (std::size_t i = 0; i < targets.size(); ++i) dev[0] += std::fabs(targets[i] - sums[i % per] / n);
    comm.sum(dev, 1);
    v.baseline = n > 0 ? dev[0] / (n * static_cast<double>(per)) : v.baseline;
  }
  return v;
}

// Where a step's time went: waiting for the loader (mean over ranks) and everything else.
struct StepTime {
  double wait_s = 0, compute_s = 0;
  double total() const { return wait_s + compute_s; }
  double stall_pct() const { return total() > 0 ? 100.0 * wait_s / total() : 0.0; }
};

// `trainer` < 0: a run without a tournament (no "trainer" field).
std::string step_json(std::uint64_t step, std::uint64_t epoch, double loss, double lr, double samples,
                      const StepTime& t, double time_s, int trainer = -1) {
  std::ostringstream s;
  s << "{\"event\":\"step\",\"step\":" << step;
  if (trainer >= 0) s << ",\"trainer\":" << trainer;
  s << ",\"epoch\":" << epoch << ",\"loss\":" << json_number(loss) << ",\"lr\":" << json_number(lr)
    << ",\"samples_per_s\":" << json_number(samples / t.total())
    << ",\"compute_samples_per_s\":" << json_number(samples / t.compute_s)
    << ",\"data_wait_s\":" << json_number(t.wait_s) << ",\"input_stall_pct\":" << json_number(t.stall_pct())
    << ",\"time_s\":" << json_number(time_s) << "}";
  return s.str();
}

// The run directory when --checkpoint is left out: a new one, never an earlier run's nor that of a run started in
// the same second (mkdir creates it or fails, so of two runs racing for a name one takes the next).
std::string create_fresh_run_directory(const std::string& model) {
  const std::string base = default_run_directory(model, std::time(nullptr));
  for (int n = 1;; ++n) {
    const std::string dir = n == 1 ? base : base + "-" + std::to_string(n);
    if (::mkdir(dir.c_str(), 0777) == 0) return dir;
    if (errno != EEXIST)
      throw std::runtime_error(dir + ": cannot create the run directory (" + std::strerror(errno) +
                               "); pass --checkpoint DIR");
  }
}

// --checkpoint DIR, created with its parents where missing. Returns whether DIR itself was made here.
bool make_checkpoint_directory(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    throw std::runtime_error("--checkpoint " + dir +
                             ": exists and is not a directory; pass a directory (it gets checkpoint.bin and "
                             "metrics.jsonl)");
  const bool made = std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("--checkpoint " + dir + ": cannot create the directory (" + ec.message() + ")");
  return made;
}

// Trainer T's checkpoint in a tournament's directory: PREFIX T SUFFIX.
constexpr std::string_view kTrainerFilePrefix = "checkpoint-t", kTrainerFileSuffix = ".bin";
std::string trainer_checkpoint(const std::string& dir, long long t) {
  return dir + "/" + std::string(kTrainerFilePrefix) + std::to_string(t) + std::string(kTrainerFileSuffix);
}

// The T of every checkpoint-tT.bin in `dir`, ascending: what a tournament leaves until its end. (With a file lost,
// the largest T + 1 still counts the trainers that wrote them.)
std::vector<long long> tournament_trainers(const std::string& dir) {
  std::vector<long long> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(kTrainerFilePrefix) || !name.ends_with(kTrainerFileSuffix)) continue;
    const std::string digits =
        name.substr(kTrainerFilePrefix.size(), name.size() - kTrainerFilePrefix.size() - kTrainerFileSuffix.size());
    // (18 digits at most: any such T fits a long long, so stoll cannot throw.)
    if (!digits.empty() && digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string::npos)
      found.push_back(std::stoll(digits));
  }
  std::sort(found.begin(), found.end());
  return found;
}

// An exclusive lock on a run directory for as long as the run lasts (flock on DIR/.fanstore-train.lock, which
// the kernel drops when the process ends, however it ends): a second run into the same directory would
// interleave its checkpoint renames and metrics lines with the first's.
// A run that ends having written nothing there (refused at set-up) takes its lock file away, and the directory too
// when it made it (not its parents): no empty run directories left behind.
class DirectoryLock {
 public:
  DirectoryLock() = default;
  DirectoryLock(const std::string& dir, bool made) : dir_(dir), path_(dir + "/.fanstore-train.lock"), made_(made) {
    // A lock taken on a file that another run's end unlinked after we opened it guards nothing: take it again.
    for (int tries = 0; tries < 100; ++tries) {
      lock();
      struct stat held, named;
      if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
          held.st_ino == named.st_ino)
        return;
      ::close(std::exchange(fd_, -1));
    }
    throw std::runtime_error(path_ + ": the lock file keeps being replaced; is another run starting there?");
  }
  DirectoryLock(DirectoryLock&& o) noexcept
      : dir_(std::move(o.dir_)), path_(std::move(o.path_)), made_(o.made_), fd_(std::exchange(o.fd_, -1)) {}
  DirectoryLock& operator=(DirectoryLock&& o) noexcept {
    std::swap(dir_, o.dir_);
    std::swap(path_, o.path_);
    std::swap(made_, o.made_);
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~DirectoryLock() {
    if (fd_ < 0) return;
    // Unlinked while still held, so a run that opens it meanwhile finds its lock on a nameless file (above).
    if (DIR* d = ::opendir(dir_.c_str())) {
      int others = 0;
      while (const dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0 &&
            std::strcmp(e->d_name, ".fanstore-train.lock") != 0)
          ++others;
      ::closedir(d);
      if (others == 0 && ::unlink(path_.c_str()) == 0 && made_) ::rmdir(dir_.c_str());
    }
    ::close(fd_);
  }

 private:
  void lock() {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(path_ + ": cannot create the run's lock file (" + std::strerror(errno) + ")");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(std::exchange(fd_, -1));
      if (e == EWOULDBLOCK)
        throw std::runtime_error("--checkpoint " + dir_ +
                                 ": another fanstore-train run is using this directory; wait for it to end, or "
                                 "choose another --checkpoint");
      throw std::runtime_error(path_ + ": cannot lock (" + std::strerror(e) + ")");
    }
  }

  std::string dir_, path_;
  bool made_ = false;
  int fd_ = -1;
};

std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// The tournament metric that ranks validation scores (accuracy, Dice or MAE).
TournamentMetric validation_metric(TaskKind task) {
  return task == TaskKind::Classification ? TournamentMetric::Accuracy
         : task == TaskKind::Segmentation ? TournamentMetric::Dice
                                          : TournamentMetric::Mae;
}

// The first line: what this run does, with every default it chose, and where its output goes.
std::string first_line(const TrainOptions& o, const TournamentPlan& plan, std::size_t ranks,
                       const ResolvedGrid& resolved, std::size_t groups, const std::string& device, double base_lr,
                       double warmup_epochs, const std::string& checkpoint_dir) {
  const std::int64_t group_batch = resolved.batch_per_group;
  std::ostringstream out;
  out << "fanstore-train: " << o.model << " on " << ranks << " rank" << (ranks == 1 ? "" : "s");
  if (plan.enabled())
    out << " as " << plan.trainers << " trainers x " << plan.ranks_per_trainer << " (tournament every " << plan.interval
        << " steps on " << format_number(plan.fraction) << " of each trainer's samples by " << metric_label(plan.metric)
        << ")";
  if (resolved.spatial() || o.grid.sync_bn)
    out << ", grid " << resolved.shape.to_string() << " (" << groups << " sample group" << (groups == 1 ? "" : "s")
        << ")";
  out << " x batch " << group_batch << " (" << device << "), " << o.optimizer.kind << " lr " << base_lr;
  if (!o.lr && o.optimizer.kind == "sgd")
    out << " (default 0.1 x " << groups * static_cast<std::size_t>(group_batch) << "/256)";
  else if (!o.lr) out << " (default)";
  out << ", " << format_number(warmup_epochs) << " warm-up epoch" << (warmup_epochs == 1 ? "" : "s")
      << (o.warmup_epochs ? "" : " (default)") << ", then " << o.schedule
      << (o.model == "resnet50" && o.zero_init_residual ? ", residual BN scales start at 0" : "")
      << "; checkpoint and metrics in " << checkpoint_dir
      << (o.checkpoint_dir.empty() ? " (default; --checkpoint DIR to choose)" : "");
  return out.str();
}

// Everything the last lines of a run report.
struct RunSummary {
  std::string grid, scaler, tournament_text, tournament_json, outputs;
  std::uint64_t steps = 0, samples = 0, bad_samples = 0;
  double total_s = 0, last_loss = std::numeric_limits<double>::quiet_NaN(), rollbacks = 0, peak_rss = 0;
  StepTime time;  // summed over the run's steps
  Validation val;
  bool has_val = false;
  std::size_t buckets = 0, buckets_in_backward = 0;
};

// The summary: one line for people and scripts, and the same as the last JSON line.
void write_summary(const TrainOptions& o, TaskKind task, std::size_t ranks, const RunSummary& r,
                   const std::string& metrics_path, std::ostream& out, MetricsLog& metrics) {
  const double rate = r.time.total() > 0 ? static_cast<double>(r.samples) / r.time.total() : 0;
  const double compute_rate = r.time.compute_s > 0 ? static_cast<double>(r.samples) / r.time.compute_s : 0;
  std::ostringstream s;
  char stall[32];
  std::snprintf(stall, sizeof stall, "%.1f%%", r.time.stall_pct());
  s << "summary: model " << o.model << "  ranks " << ranks << "  grid " << r.grid << "  steps " << r.steps << "  time "
    << r.total_s << " s  train " << rate << " samples/s (input stall " << stall << ", " << compute_rate
    << " samples/s without the waits)  final loss " << r.last_loss;
  if (r.has_val) s << "  val " << metric_name(task) << " " << r.val.metric;
  if (task == TaskKind::Regression && r.has_val) s << " (predict-the-mean " << r.val.baseline << ")";
  if (!r.tournament_text.empty()) s << "  " << r.tournament_text;
  s << "  bad samples " << r.bad_samples << "  rollbacks " << r.rollbacks << r.scaler;
  s << "  peak RSS " << static_cast<long long>(r.peak_rss / (1 << 20)) << " MiB";
  if (ranks > 1)
    s << "  allreduce buckets " << r.buckets << " (" << r.buckets_in_backward << " started during backward)";
  out << s.str() << "\n";
  out << "outputs: " << r.outputs << "  " << metrics_path << "\n";
  std::ostringstream j;
  j << "{\"event\":\"summary\",\"model\":\"" << o.model << "\",\"ranks\":" << ranks << ",\"grid\":\"" << r.grid
    << "\",\"steps\":" << r.steps << ",\"time_s\":" << json_number(r.total_s)
    << ",\"samples_per_s\":" << json_number(rate) << ",\"compute_samples_per_s\":" << json_number(compute_rate)
    << ",\"data_wait_s\":" << json_number(r.time.wait_s) << ",\"input_stall_pct\":" << json_number(r.time.stall_pct())
    << ",\"final_loss\":" << json_number(r.last_loss) << ",\"metric\":\"" << metric_name(task)
    << "\",\"val_metric\":" << json_number(r.val.metric) << ",\"baseline_mae\":" << json_number(r.val.baseline)
    << ",\"samples\":" << r.samples;
  if (!r.tournament_json.empty()) j << "," << r.tournament_json;
  j << ",\"bad_samples\":" << r.bad_samples << ",\"rollbacks\":" << r.rollbacks
    << ",\"allreduce_buckets\":" << r.buckets << ",\"buckets_started_in_backward\":" << r.buckets_in_backward
    << ",\"peak_rss_bytes\":" << static_cast<long long>(r.peak_rss) << "}";
  metrics.write(j.str());
}

// A tournament resumes only when every trainer found its file, all at one (stored) step, or when none did. Before any
// message of the resume: a refused one says nothing of a step it will not take.
void check_trainers_agree(const std::string& dir, int trainers, Communicator& comm, Communicator& world, bool resumed,
                          std::uint64_t step) {
  // A run without --trainers left checkpoint.bin where the trainers' files would be: starting the tournament
  // afresh would write over it.
  double plain = !resumed && world.rank() == 0 && std::filesystem::exists(dir + "/checkpoint.bin") ? 1.0 : 0.0;
  world.max(&plain, 1);
  if (plain > 0)
    throw GridError(dir +
                    " holds checkpoint.bin but no trainer's checkpoint-tT.bin: resume a run without --trainers "
                    "without it, or give the tournament another --checkpoint directory");
  // Over the trainers (their first ranks): how many found a file, and the lowest and highest step of those.
  double found = comm.rank() == 0 && resumed ? 1.0 : 0.0;
  world.sum(&found, 1);
  double hi[2] = {resumed ? static_cast<double>(step) : -1.0, resumed ? -static_cast<double>(step) : -1e300};
  world.max(hi, 2);
  const auto with_file = static_cast<long long>(found);
  if (with_file == 0 || (with_file == trainers && hi[0] == -hi[1])) return;
  throw GridError(dir + ": " + std::to_string(with_file) + " of the " + std::to_string(trainers) +
                  " trainers' checkpoint-tT.bin files are there" +
                  (with_file > 0 ? ", at steps " + std::to_string(static_cast<long long>(-hi[1])) + " to " +
                                       std::to_string(static_cast<long long>(hi[0]))
                                 : std::string()) +
                  "; resume needs every trainer's file of one run (as many --trainers as wrote them), or start "
                  "without --resume");
}

// --resume. Only rank 0 of a trainer writes its checkpoints, so only its file counts: with node-local
// checkpoint directories another rank may hold an older file or none. That rank decides and sends
// the bytes to the trainer's other ranks. `position` holds this run's grid (sample groups, batch).
// Returns whether a checkpoint was restored; trainers of a tournament all resume from the same step
// or all start afresh.
bool resume(const std::string& path, const std::string& dir, Communicator& comm, Communicator& world, int trainers,
            std::uint64_t steps_per_epoch, Model& model, Optimizer& optimizer, TrainingPosition& position,
            std::ostream& err) {
  const bool leader = world.rank() == 0, tournament = trainers > 1;
  const std::uint64_t groups = position.world_size, group_batch = position.batch_per_rank, seed = position.seed;
  const bool found = comm.rank() == 0 && std::filesystem::exists(path);
  // Every rank of every trainer agrees on each step's errors (agree_on_errors), even where it has no file to read.
  std::vector<char> bytes =
      agree_on_errors(world, [&] { return found ? read_checkpoint_file(path) : std::vector<char>(); });
  // One more than the bytes when the file exists: an empty one is a damaged checkpoint, not "none yet".
  std::uint64_t size = found ? bytes.size() + 1 : 0;
  comm.broadcast(&size, sizeof size, 0);
  const bool resumed = size > 0;
  bytes.resize(resumed ? size - 1 : 0);
  comm.broadcast(bytes.data(), bytes.size(), 0);
  agree_on_errors(world, [&] {
    if (!resumed) return;
    position = restore_checkpoint(path, std::move(bytes), model, optimizer);
    // A tournament split its data, sets and pairings with --seed before the checkpoint was read: with another one,
    // the trainers' shares would change under them.
    if (tournament && position.seed != seed)
      throw std::invalid_argument(path + " was written with --seed " + std::to_string(position.seed) +
                                  ", which split the tournament's data: resume with --seed " +
                                  std::to_string(position.seed));
  });
  if (tournament) check_trainers_agree(dir, trainers, comm, world, resumed, position.global_step);
  if (resumed) {
    if (leader && position.seed != seed)
      err << "fanstore-train: warning: checkpoint was written with --seed " << position.seed << "; continuing with its "
          << "seed (the shuffle and augmentation go on as they were), not --seed " << seed << "\n";
    if (position.world_size != groups || position.batch_per_rank != group_batch) {
      const TrainingPosition was = position;
      position = rebatch_position(position, groups, group_batch, steps_per_epoch);
      if (leader)
        err << "fanstore-train: warning: checkpoint was written by " << was.world_size << " sample group(s) x batch "
            << was.batch_per_rank << "; continuing with " << groups << " x " << group_batch << ": its step "
            << was.global_step << " (epoch " << was.epoch << ", batch " << was.next_batch << ") is step "
            << position.global_step << " (epoch " << position.epoch << ", batch " << position.next_batch
            << ") of this batching ("
            // The same global batch deals each step the same samples (shard_indices strides one permutation).
            << (was.world_size * was.batch_per_rank == groups * group_batch
                    ? "each step takes the same samples, summed in another order: "
                    : "the data order changes: ")
            << "the run is not bit-identical)\n";
    } else if (position.next_batch >= steps_per_epoch) {
      // Fewer samples than when it was written: its epoch is done in this data (it crashed on a batch past the end).
      const TrainingPosition was = position;
      position = rebatch_position(position, groups, group_batch, steps_per_epoch);
      if (leader)
        err << "fanstore-train: warning: checkpoint's step " << was.global_step << " (epoch " << was.epoch << ", batch "
            << was.next_batch << ") is past the " << steps_per_epoch
            << " steps of an epoch of this data (fewer samples than when it was written): continuing at step "
            << position.global_step << " (epoch " << position.epoch << ", batch 0)\n";
    }
    if (leader)
      err << "fanstore-train: resumed from " << path << " at step " << position.global_step << " (epoch "
          << position.epoch << ", batch " << position.next_batch << ")\n";
  } else if (leader) {
    err << "fanstore-train: --resume: no " << path << " yet, starting from scratch\n";
  }
  return resumed;
}

// The options' own limits, before any work.
void check_options(const TrainOptions& o) {
  if (o.batch <= 0 || o.epochs <= 0) throw std::invalid_argument("--batch and --epochs must be positive");
  if (o.lr && *o.lr < 0) throw std::invalid_argument("--lr must not be negative");
  if (o.warmup_epochs && !(*o.warmup_epochs >= 0 && *o.warmup_epochs <= o.epochs))
    throw std::invalid_argument("--warmup-epochs must lie between 0 and --epochs (" + std::to_string(o.epochs) + ")");
  if (!o.lr && o.optimizer.kind == "lars") (void)default_learning_rate(o.optimizer.kind, 1);  // throws: lars needs --lr
  if (o.checkpoint_dir.empty() && o.resume)
    throw std::invalid_argument("--resume needs --checkpoint DIR (the directory of the run to continue)");
}

// The steps of a run once run() has set it up: each epoch's batches through forward, loss, backward and the
// optimizer, the loss guard, tournament rounds, validation, checkpoints and metrics. The first members are the
// set-up's parts, the last ones the run's running totals.
struct TrainingLoop {
  const TrainOptions& o;
  TaskKind task;
  const TournamentPlan& plan;
  Tournament& tournament;
  Communicator& comm;  // the trainer's ranks
  Model& model;
  Optimizer& optimizer;
  GridRun& grid_run;
  GradientReduction& gradients;
  const data::SampleDataset& train_set;
  const data::SampleDataset* val_set;  // null: no --val
  data::BatchLoader& loader;
  const ScheduleOptions& schedule;
  TrainingPosition& position;
  MetricsLog& metrics;
  std::ostream& err;
  bool leader, trainer_leader, fp16;
  int world_rank, trainer;
  std::size_t groups, per_step;
  std::int64_t group_batch;
  int prefetch_threads;  // --prefetch-threads, or sized to the node (decode_threads)
  std::string checkpoint_path;
  Clock::time_point start = Clock::now();
  LossGuard guard{o.spike_factor};
  LossScaler scaler{fp16};
  ProgressLine progress{leader};  // only rank 0 talks
  StepTime run_time{};            // summed over the run's steps
  double last_loss = std::numeric_limits<double>::quiet_NaN();
  std::uint64_t samples_trained = 0;
  std::uint64_t val_bad_samples = 0;  // skipped by validations (--skip-bad-samples)
  Validation last_val{};
  bool stopped = false, validated_at_end = false;
  int stop_signal = 0;  // the signal that stopped the run, caught by any rank (StopSignals)
  std::vector<double> trainer_losses =
      std::vector<double>(static_cast<std::size_t>(plan.trainers), std::numeric_limits<double>::quiet_NaN());

  // Whether the run stops once `steps` steps are done (--max-steps).
  bool reaches_max_steps(std::uint64_t steps) const {
    return o.max_steps > 0 && steps >= static_cast<std::uint64_t>(o.max_steps);
  }

  void save() { save_to(checkpoint_path); }
  // Sharded optimizer state is gathered by every rank of its spatial group; the trainer's first rank writes.
  void save_to(const std::string& path) {
    // The step's recycled tensors would sit beside the gathered state: a rank's peak was the checkpoint's.
    Storage::release_kept_host();
    if (!optimizer.sharded() && !trainer_leader) return;
    const auto state = optimizer.whole_state();
    const ParameterTable& table = model.parameters();
    // Gathered where each rank keeps its part (--shard-weights); else the arena is written as it is.
    const auto values = table.values_sharded() ? table.read(Arena::Values) : std::vector<float>();
    if (trainer_leader) save_checkpoint(path, model, optimizer, values, state, position);
  }

  // The tournament score of the model as it stands: its metric on this trainer's tournament set; a model with a
  // NaN/Inf weight has diverged and scores NaN (max pooling can hide it from the loss).
  double tournament_score() {
    if (!model.parameters().all_values_finite()) return std::numeric_limits<double>::quiet_NaN();
    const bool by_loss = plan.metric == TournamentMetric::Loss;
    const Validation v = validate(grid_run, model.backend(), tournament.tournament_set(), task, comm, group_batch,
                                  prefetch_threads, o.skip_bad_samples, by_loss);
    return by_loss ? v.loss : v.metric;
  }

  // The first stop signal that any rank of any trainer caught (StopSignals), or 0. Collective over every rank.
  int agree_on_stop_signal() {
    double caught[1] = {static_cast<double>(StopSignals::caught())};
    comm.max(caught, 1);
    const std::vector<double> all = tournament.per_trainer({caught[0]});
    return static_cast<int>(*std::max_element(all.begin(), all.end()));
  }

  void run_epochs() {
    for (std::uint64_t epoch = position.epoch; epoch < static_cast<std::uint64_t>(o.epochs) && !stopped; ++epoch) {
      train_epoch(epoch);
      // A signal at an epoch's last step, or during its validation, stops the run here: the epoch's checkpoint
      // and validation are done.
      if (!stopped && epoch + 1 < static_cast<std::uint64_t>(o.epochs) && (stop_signal = agree_on_stop_signal()))
        stopped = true;
    }
    // A run that ends inside an epoch (--max-steps) validates where it ends, and records it as an epoch's end does.
    if (val_set && !validated_at_end && stop_signal == 0) validate_epoch(position.epoch, false);
  }

  void train_epoch(std::uint64_t epoch) {
    data::ShardSpec spec;
    spec.dataset_size = train_set.size();
    spec.batch_size = static_cast<std::size_t>(group_batch);
    spec.rank = static_cast<std::size_t>(grid_run.sample_group());
    spec.world_size = groups;
    spec.seed = position.seed;
    spec.epoch = epoch;
    auto batches = data::split_into_batches(data::shard_indices(spec), spec.batch_size);
    const std::size_t first = epoch == position.epoch ? position.next_batch : 0;  // mid-epoch resume
    std::vector<std::vector<std::size_t>> remaining(batches.begin() + static_cast<std::ptrdiff_t>(first),
                                                    batches.end());
    data::hint_epoch_order(train_set, remaining, world_rank);  // FanStore daemon prefetch; no-op without one
    data::Prefetcher prefetcher(loader, std::move(remaining), epoch, {prefetch_threads, 4});
    InputFeed feed(model.backend(), prefetcher);
    validated_at_end = false;
    for (std::size_t j = first; j < batches.size() && !stopped; ++j) step(feed, epoch, j, batches.size());
    if (position.next_batch == batches.size()) {
      position.epoch = epoch + 1;
      position.next_batch = 0;
    }
    if (leader) progress.finish();
    save();  // first: a validation sample that cannot be read must not cost the epoch's training
    if (val_set && (!stopped || position.next_batch == 0)) validate_epoch(epoch);
  }

  // Batch j of `batches` in `epoch`: one optimizer step (or a rollback), its metrics, a tournament round when due.
  void step(InputFeed& feed, std::uint64_t epoch, std::size_t j, std::size_t batches) {
    Backend& backend = model.backend();
    ParameterTable& table = model.parameters();
    // The loader's wait is part of the step: an I/O stall is exactly what users need to see. The batch was
    // taken while the previous step ran (its stall counted the time the device sat idle meanwhile), or now.
    auto fed = feed.next();
    const auto step_start = Clock::now();
    model.set_step(position.global_step);
    Tensor y = grid_run.forward(fed->input, Mode::Train);
    LossResult loss = grid_run.loss(task, y, fed->batch);
    double sums[2] = {loss.loss, fed->stall_s};
    comm.sum(sums, 2);  // every rank takes the same guard decision; the stall is the ranks' mean
    const double mean_loss = sums[0] / static_cast<double>(comm.size());
    const double lr = learning_rate_at(schedule, static_cast<std::int64_t>(position.global_step)) * position.lr_scale;

    if (!guard.accept(mean_loss, model, optimizer)) {
      guard.roll_back(model, optimizer);
      if (leader) {
        progress.finish();
        err << "fanstore-train: warning: step " << position.global_step + 1 << ": " << guard.last_reason() << " (loss "
            << mean_loss << "); rolled back to the last good state and skipped the batch (rollback "
            << guard.rollbacks() << ")\n";
        metrics.write("{\"event\":\"rollback\",\"step\":" + std::to_string(position.global_step + 1) +
                      ",\"loss\":" + json_number(mean_loss) + ",\"reason\":\"" + guard.last_reason() + "\"}");
      }
      if (guard.consecutive_rejections() >= 5) {
        const std::string why = "5 rollbacks without a good update between them; stopping (check the data and --lr)";
        // The guard decides on the trainer's summed loss: without a tournament every rank stops here alike (one
        // line from rank 0); one trainer of several must end the others, which wait in the next tournament.
        if (!plan.enabled()) throw GridError(why);
        throw std::runtime_error(why);
      }
    } else {
      // fp16: the loss gradient is scaled up so small gradients survive the half type, and the
      // F32 gradients scaled back; an overflow skips the step and halves the scale.
      if (scaler.enabled()) backend.scale(loss.gradient, scaler.scale());
      gradients.begin_step();
      grid_run.backward(loss.gradient);
      gradients.finish();
      bool step_ok = true;
      if (scaler.enabled()) {
        const float used = scaler.scale();
        // Whole gradients: fp16 runs data parallel only (a spatial grid refuses it), so every rank decides alike.
        Tensor gradients = table.arena(Arena::Gradients);
        backend.scale(gradients, 1.f / used);
        step_ok = scaler.update(backend.all_finite(gradients));
        if (!step_ok && leader) {
          progress.finish();
          err << "fanstore-train: step " << position.global_step + 1 << ": fp16 gradients overflowed at loss scale "
              << used << "; step skipped, scale now " << scaler.scale() << "\n";
        }
      }
      if (step_ok) optimizer.step(table, static_cast<float>(lr));
      last_loss = mean_loss;  // the loss of the state kept, never a rejected one
    }
    // The next batch while this step's kernels run, unless this step is the last; its stall belongs to the next
    // step. (On a GPU the synchronize below also waits for that batch's copy: a late batch's copy counts here.)
    const bool last = j + 1 >= batches || reaches_max_steps(position.global_step + 1);
    const double ahead_stall = last ? 0.0 : feed.take_ahead();
    backend.synchronize();  // a GPU queues work: the step ends when its kernels have run
    const StepTime step{sums[1] / static_cast<double>(comm.size()), seconds_since(step_start) - ahead_stall};
    run_time.wait_s += step.wait_s;
    run_time.compute_s += step.compute_s;
    samples_trained += per_step;
    ++position.global_step;
    position.epoch = epoch;
    position.next_batch = j + 1;
    if (o.inject_nan_at_step > 0 && position.global_step == static_cast<std::uint64_t>(o.inject_nan_at_step) &&
        (o.inject_nan_trainer < 0 || o.inject_nan_trainer == trainer)) {
      if (table.value_part().begin == 0) {  // the rank that keeps it, with sharded weights
        Tensor first = table.arena(Arena::Values).slice(0, Shape{1});
        backend.fill(first, std::numeric_limits<float>::quiet_NaN());
      }
    }
    // Every trainer's loss and learning rate (one curve per trainer).
    const std::vector<double> values = tournament.per_trainer({mean_loss, lr});
    for (int t = 0; t < plan.trainers; ++t) {
      const auto i = 2 * static_cast<std::size_t>(t);
      trainer_losses[static_cast<std::size_t>(t)] = values[i];
      if (leader)
        metrics.write(step_json(position.global_step, epoch, values[i], values[i + 1], static_cast<double>(per_step),
                                step, seconds_since(start), tournament.enabled() ? t : -1));
    }
    const auto round = tournament.play_if_due(position.global_step, position.lr_scale, model, optimizer,
                                              [this] { return tournament_score(); });
    if (round.took_other) {
      position.lr_scale = round.lr_scale;
      guard.rebase(model, optimizer);
    }
    for (const auto& record : round.records)
      if (leader) metrics.write(record);

    if (leader) {
      char rates[96];
      std::snprintf(rates, sizeof rates, "%.1f samples/s  input stall %.0f%%",
                    static_cast<double>(per_step) / step.total(), step.stall_pct());
      std::ostringstream line;
      line << "epoch " << epoch + 1 << "/" << o.epochs << " step " << j + 1 << "/" << batches << "  loss " << mean_loss
           << "  " << rates;
      progress.update(line.str());
    }
    if (o.checkpoint_every > 0 && position.global_step % static_cast<std::uint64_t>(o.checkpoint_every) == 0) save();
    if (reaches_max_steps(position.global_step)) stopped = true;
    // A stop signal ends the run at this step, unless the step ends its epoch (run_epochs stops after the epoch's
    // validation) or the run (which then ends as usual).
    const bool epoch_ends = j + 1 == batches;
    if (!stopped && !epoch_ends && (stop_signal = agree_on_stop_signal())) stopped = true;
  }

  // Every trainer validates its own model on the whole validation set at the end of an epoch (`whole`), or at the
  // run's end inside one.
  void validate_epoch(std::uint64_t epoch, bool whole = true) {
    last_val =
        validate(grid_run, model.backend(), *val_set, task, comm, group_batch, prefetch_threads, o.skip_bad_samples);
    val_bad_samples += last_val.bad_samples;
    validated_at_end = true;
    const std::vector<double> vals = tournament.per_trainer({last_val.metric});
    for (int t = 0; t < plan.trainers && leader; ++t) {
      const double metric = vals[static_cast<std::size_t>(t)];
      std::string line = "{\"event\":\"validation\",\"epoch\":" + std::to_string(epoch) +
                         ",\"step\":" + std::to_string(position.global_step) +
                         (plan.enabled() ? ",\"trainer\":" + std::to_string(t) : "") + ",\"" + metric_name(task) +
                         "\":" + json_number(metric);
      if (task == TaskKind::Regression) line += ",\"baseline_mae\":" + json_number(last_val.baseline);
      metrics.write(line + "}");
      err << "fanstore-train: " << (whole ? "epoch " : "step " + std::to_string(position.global_step) + " (in epoch ")
          << epoch + 1 << (whole ? "" : ")") << (plan.enabled() ? " trainer " + std::to_string(t) : "")
          << " validation " << metric_name(task) << " " << metric << "\n";
    }
  }

  // The run's output model is the best trainer's: by validation score, or without --val by the tournament score;
  // its first rank writes it as checkpoint.bin. Then what the last lines report.
  RunSummary summarize(Communicator& world, const std::string& checkpoint_dir) {
    int best = 0;
    if (plan.enabled()) {
      best = tournament.choose_best(val_set ? last_val.metric : tournament_score(),
                                    val_set ? validation_metric(task) : plan.metric);
      if (trainer == best) save_to(checkpoint_dir + "/checkpoint.bin");
      last_loss = trainer_losses[static_cast<std::size_t>(best)];
      if (val_set) last_val.metric = tournament.final_scores()[static_cast<std::size_t>(best)];
    }
    const auto all_rollbacks = tournament.per_trainer({static_cast<double>(guard.rollbacks())});
    double peak_rss[1] = {peak_rss_bytes()};
    world.max(peak_rss, 1);  // the busiest rank
    // Every rank skips the bad samples of its own share (one rank per sample group counts them: the spatial ranks
    // of a group read parts of the same samples); every trainer validates the whole set, trainer 0's count.
    double bad[1] = {grid_run.counts_for_group()
                         ? static_cast<double>(loader.bad_sample_count() + (trainer == 0 ? val_bad_samples : 0))
                         : 0.0};
    world.sum(bad, 1);

    RunSummary summary;
    summary.grid = grid_run.grid().to_string();
    summary.steps = position.global_step;
    summary.samples = samples_trained * static_cast<std::uint64_t>(plan.trainers);  // every trainer's samples
    summary.total_s = seconds_since(start);
    summary.time = run_time;
    summary.last_loss = last_loss;
    summary.val = last_val;
    summary.has_val = val_set != nullptr;
    summary.bad_samples = static_cast<std::uint64_t>(bad[0]);
    summary.rollbacks = std::accumulate(all_rollbacks.begin(), all_rollbacks.end(), 0.0);
    summary.peak_rss = peak_rss[0];
    summary.buckets = gradients.bucket_count();
    summary.buckets_in_backward = gradients.started_during_backward();
    if (scaler.enabled()) {
      std::ostringstream f;
      f << "  fp16 overflow skips " << scaler.skipped_steps() << " (loss scale " << scaler.scale() << ")";
      summary.scaler = f.str();
    }
    if (plan.enabled()) {
      summary.tournament_text =
          tournament.summary_text(val_set ? metric_name(task) : metric_label(plan.metric), summary.total_s);
      summary.tournament_json = tournament.summary_json();
    }
    summary.outputs = plan.enabled() ? checkpoint_dir + "/checkpoint.bin (trainer " + std::to_string(best) +
                                           "'s; every trainer's in checkpoint-tT.bin)"
                                     : checkpoint_path;
    return summary;
  }
};

int run(const TrainOptions& o, Communicator& world, std::ostream& out, std::ostream& err) {
  const bool leader = world.rank() == 0;  // talks and writes the metrics
  const TaskKind task = task_for_model(o.model);
  // Options every rank checks alike, before any work: rank 0 alone says what is wrong, as for a --grid.
  const auto [plan, decay] = [&] {
    try {
      check_options(o);
      const TournamentPlan p = parse_tournament(o.tournament, task, world.size());
      if (o.inject_nan_trainer >= p.trainers)
        throw std::invalid_argument("--inject-nan-trainer " + std::to_string(o.inject_nan_trainer) +
                                    ": pass a trainer below --trainers " + std::to_string(p.trainers) +
                                    " (or -1 for all)");
      return std::pair{p, parse_decay_kind(o.schedule)};
    } catch (const std::invalid_argument& e) {
      throw GridError(e.what());
    }
  }();
  const StopSignals stop_signals(leader);
  // Each trainer is a contiguous block of ranks with a communicator of its own (one trainer: the world).
  Tournament tournament(plan, world, o.seed);
  const int trainer = tournament.trainer();
  Communicator& comm = tournament.trainer_comm();
  const bool trainer_leader = comm.rank() == 0;  // writes its trainer's checkpoint
  std::ostream quiet(nullptr);                   // what other trainers would repeat
  const std::size_t ranks = static_cast<std::size_t>(world.size());
  const double warmup_epochs = o.warmup_epochs ? *o.warmup_epochs : default_warmup_epochs(o.epochs);
  // Empty: rank 0 creates a default one once the run is set up.
  std::string checkpoint_dir = o.checkpoint_dir;

  // An explicit --grid that cannot be right is one line before any work ("auto" needs the model first).
  check_trainer_grid(o.grid, o.model, plan.trainers, comm.size());

  // From here on each step that every rank runs agrees whether it failed anywhere (agree_on_errors): rank 0 then
  // prints the one line for the whole job, whether every rank found the error (the data's layout, a model that
  // cannot take the input) or only some (a file one rank reads), and every rank exits without MPI_Abort.
  std::unique_ptr<data::SampleDataset> train_set, val_set;
  ModelOptions model_options;
  const Precision precision = parse_precision(o.precision);
  std::shared_ptr<Backend> backend_of_run;
  agree_on_errors(world, [&] {
    train_set = open_dataset(o.model, o.data_dir, true, o.input_size, o.classes);
    if (!o.val_dir.empty()) {
      val_set = open_dataset(o.model, o.val_dir, false, o.input_size, o.classes);
      require_same_layout(*train_set, *val_set, o.val_dir);
    }
    // Trainers start from different initial weights (trainer 0 from the plain run's).
    model_options = model_options_for(o.model, *train_set, o.data_dir, o.batch, o.classes,
                                      o.seed + static_cast<std::uint64_t>(trainer));
    model_options.zero_init_residual = o.zero_init_residual;
    backend_of_run = make_backend({parse_device_choice(o.device), o.threads, precision});
  });
  // The grid: --grid S,D,H,W, "auto" (the performance model; --explain prints its table and stops), or
  // data parallelism. The batch is per sample group.
  // Its collectives are on the trainer's ranks, which fail alike; with --trainers one trainer may fail where another
  // does not, and the others must not go on to agree on the grid without it.
  ResolvedGrid resolved = agree_on_errors(world, [&] {
    return resolve_grid(o.grid, o.model, model_options, o.threads, o.optimizer, backend_of_run->device(), comm,
                        trainer == 0 ? out : quiet, trainer == 0 ? err : quiet);
  });
  if (o.grid.explain) return 0;
  if (o.grid.grid == "auto") tournament.agree_on_grid(resolved);
  model_options.batch = resolved.batch_per_group;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  agree_on_errors(world, [&] {
    model = build_model(o.model, std::move(backend_of_run), model_options);
    optimizer = make_optimizer(model->parameters(), o.optimizer);
  });
  // On GPUs device memory travels over NCCL (gradient buckets on their own stream, the grid's halos
  // and spatial sums); host values (losses, metrics, decisions) and CPU runs over MPI.
  const auto nccl = make_device_communicator(comm, model->backend());
  Communicator& device_comm = nccl ? *nccl : comm;
  GridRun grid_run(*model, device_comm, resolved, o.grid);
  grid_run.check_group_samples_on(o.skip_bad_samples);
  grid_run.shard(*optimizer);
  agree_on_errors(world, [&] {
    if (const auto slab = grid_run.slab_read()) {
      // Each rank reads only its slab (plus the first layer's halo) of every sample.
      train_set = open_dataset(o.model, o.data_dir, true, o.input_size, o.classes, &*slab);
      if (val_set) val_set = open_dataset(o.model, o.val_dir, false, o.input_size, o.classes, &*slab);
    }
  });

  const std::size_t groups = static_cast<std::size_t>(grid_run.sample_groups());
  const std::int64_t group_batch = resolved.batch_per_group;
  const std::size_t per_step = groups * static_cast<std::size_t>(group_batch);  // the trainer's global batch
  // Each trainer's share, less its tournament set: every trainer finds a share too small alike, rank 0 says so.
  agree_on_errors(world, [&] { tournament.split_samples(train_set, per_step); });
  const double base_lr = o.lr ? *o.lr : default_learning_rate(o.optimizer.kind, static_cast<std::int64_t>(per_step));
  const std::size_t steps_per_epoch = train_set->size() / per_step;
  agree_on_errors(world, [&] {  // a trainer's share may fall short where another's does not
    if (steps_per_epoch == 0)
      throw data::DataError(o.data_dir, "has " + std::to_string(train_set->size()) + " samples, fewer than one step (" +
                                            std::to_string(group_batch) + " per sample group x " +
                                            std::to_string(groups) +
                                            " groups): give a smaller --batch, or more samples");
  });

  ScheduleOptions schedule;
  schedule.base_lr = base_lr;
  schedule.decay = decay;
  schedule.total_steps = static_cast<std::int64_t>(steps_per_epoch) * o.epochs;
  schedule.warmup_steps = static_cast<std::int64_t>(std::llround(warmup_epochs * static_cast<double>(steps_per_epoch)));

  // With a tournament every trainer has its file; checkpoint.bin is then the best trainer's at the end.
  const auto checkpoint_file = [&](int t) {
    return plan.enabled() ? trainer_checkpoint(checkpoint_dir, t) : checkpoint_dir + "/checkpoint.bin";
  };
  // Rank 0 creates the directory (or names and creates the default one) and locks it for the run; a run without
  // --resume does not write over a checkpoint. Every trainer's first rank writes into the directory.
  DirectoryLock directory_lock;
  agree_on_errors(world, [&] {
    if (!leader) return;
    bool made = true;
    if (checkpoint_dir.empty()) checkpoint_dir = create_fresh_run_directory(o.model);
    else made = make_checkpoint_directory(checkpoint_dir);
    directory_lock = DirectoryLock(checkpoint_dir, made);
    const std::string plain = checkpoint_dir + "/checkpoint.bin";
    const bool has_plain = std::filesystem::exists(plain);
    const std::vector<long long> trainers = tournament_trainers(checkpoint_dir);
    if (!o.resume && (has_plain || !trainers.empty()))
      throw std::runtime_error(checkpoint_dir + " holds a checkpoint (" +
                               (has_plain ? plain : trainer_checkpoint(checkpoint_dir, trainers.front())) +
                               "): pass --resume to continue it, or choose another --checkpoint");
    // A tournament stopped before its end left only the trainers' files: resuming it as one run would start afresh.
    if (o.resume && !plan.enabled() && !has_plain && !trainers.empty())
      throw std::runtime_error(checkpoint_dir + " holds a tournament's checkpoints (" +
                               trainer_checkpoint(checkpoint_dir, trainers.front()) + ", " +
                               std::to_string(trainers.size()) + " trainers' files): resume it with --trainers " +
                               std::to_string(trainers.back() + 1) + ", or choose another --checkpoint");
  });
  if (o.checkpoint_dir.empty()) broadcast_string(world, checkpoint_dir);
  if (plan.enabled())  // the other trainers' first ranks, on nodes of their own maybe
    agree_on_errors(world, [&] {
      if (trainer_leader && !leader) make_checkpoint_directory(checkpoint_dir);
    });
  const std::string checkpoint_path = checkpoint_file(trainer);
  const std::string metrics_path = o.metrics_path.empty() ? checkpoint_dir + "/metrics.jsonl" : o.metrics_path;
  if (leader)
    out << first_line(o, plan, ranks, resolved, groups, model->backend().describe(), base_lr, warmup_epochs,
                      checkpoint_dir)
        << std::endl;
  TrainingPosition position;
  position.seed = o.seed;
  position.world_size = groups;
  position.batch_per_rank = static_cast<std::uint64_t>(group_batch);
  const bool resumed = o.resume && resume(checkpoint_path, checkpoint_dir, comm, world, plan.trainers, steps_per_epoch,
                                          *model, *optimizer, position, err);
  // A run already at its end has nothing to train: say so, rather than a summary of no steps and a NaN loss.
  const bool at_end = position.epoch >= static_cast<std::uint64_t>(o.epochs) ||
                      (o.max_steps > 0 && position.global_step >= static_cast<std::uint64_t>(o.max_steps));
  if (resumed && at_end) {
    if (leader)
      out << "fanstore-train: --resume: " << checkpoint_path << " is at the run's end (step " << position.global_step
          << ", epoch " << position.epoch << " of " << o.epochs << "); nothing to train: pass "
          << (position.epoch < static_cast<std::uint64_t>(o.epochs) ? "a larger --max-steps"
              : o.max_steps > 0 && position.global_step >= static_cast<std::uint64_t>(o.max_steps)
                  ? "more --epochs and a larger --max-steps"
                  : "more --epochs")
          << " to go on" << std::endl;
    return 0;
  }

  const auto metrics_log = agree_on_errors(world, [&] {
    return std::make_unique<MetricsLog>(leader ? metrics_path : std::string(), o.resume, !o.metrics_path.empty());
  });
  MetricsLog& metrics = *metrics_log;
  const auto gradients =
      // Saturated: a size past 2^64 bytes is one bucket, as any size past the model's (the cast would wrap).
      grid_run.make_gradient_reduction(
          *optimizer, o.bucket_mb * 1048576.0 >= static_cast<double>(std::numeric_limits<std::size_t>::max())
                          ? std::numeric_limits<std::size_t>::max()
                          : static_cast<std::size_t>(o.bucket_mb * 1048576.0));
  grid_run.set_gradient_ready_hook([&](const Layer& layer) { gradients->on_layer_ready(layer); });
  data::BatchLoader loader(*train_set, {position.seed, o.skip_bad_samples, model->backend().input_memory()});
  TrainingLoop loop{.o = o,
                    .task = task,
                    .plan = plan,
                    .tournament = tournament,
                    .comm = comm,
                    .model = *model,
                    .optimizer = *optimizer,
                    .grid_run = grid_run,
                    .gradients = *gradients,
                    .train_set = *train_set,
                    .val_set = val_set.get(),
                    .loader = loader,
                    .schedule = schedule,
                    .position = position,
                    .metrics = metrics,
                    .err = err,
                    .leader = leader,
                    .trainer_leader = trainer_leader,
                    .fp16 = precision == Precision::FP16,
                    .world_rank = world.rank(),
                    .trainer = trainer,
                    .groups = groups,
                    .per_step = per_step,
                    .group_batch = group_batch,
                    .prefetch_threads = decode_threads(o.prefetch_threads, model->backend().device() == Device::Cuda),
                    .checkpoint_path = checkpoint_path};
  loop.run_epochs();
  if (loop.stop_signal != 0) {  // the best trainer's choice and the summary wait for the run's end
    // No rank exits before every checkpoint is written: mpirun ends the job when the first rank exits non-zero.
    double written[1] = {1};
    world.sum(written, 1);
    if (leader) {
      out << "fanstore-train: stopped by " << stop_signal_name(loop.stop_signal) << " after step "
          << position.global_step << "; checkpoint in " << checkpoint_dir
          << " (the same command with --resume --checkpoint " << checkpoint_dir << " goes on)" << std::endl;
      metrics.write("{\"event\":\"stopped\",\"step\":" + std::to_string(position.global_step) + ",\"signal\":\"" +
                    stop_signal_name(loop.stop_signal) + "\"}");
    }
    return 128 + loop.stop_signal;
  }
  const RunSummary summary = loop.summarize(world, checkpoint_dir);
  if (leader) write_summary(o, task, ranks, summary, metrics_path, out, metrics);
  return 0;
}

}  // namespace

int train_command(const TrainOptions& options, Communicator& comm, std::ostream& out, std::ostream& err) {
  try {
    return run(options, comm, out, err);
  } catch (const GridError& e) {
    // Every rank finds the same grid problem at the same point, before any work: rank 0 says so in one
    // line and the others wait for it, so that mpirun, which stops the job when the first rank exits
    // non-zero, does not cut that line off.
    report_grid_error(e, comm, err);
    return 1;
  } catch (const std::exception& e) {
    return report_error_and_abort(e, comm, err);
  }
}

}  // namespace fanstore::trainer
