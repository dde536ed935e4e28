// fanstore-train's grid options: resolving --grid (a grid, "auto" with the performance model, or plain
// data parallelism), --explain, and --benchmark on a grid.
#pragma once

#include <cstdint>
#include <exception>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainer/distributed.hpp"
#include "trainer/distributed_grid.hpp"
#include "trainer/models.hpp"
#include "trainer/train_loop.hpp"

namespace fanstore::trainer {

struct ResolvedGrid {
  GridShape shape;
  std::int64_t batch_per_group = 1;
  // --grid auto: the split layers whose pieces its model found slower than one kernel after the halo.
  std::vector<std::string> one_kernel_layers;
  bool spatial() const { return shape.spatially_split(); }
};

// The run's grid. `batch` is --batch: per sample group for an explicit grid; "auto" keeps the global
// batch of plain data parallelism (batch x ranks) and gives each of the S groups batch x ranks / S.
// "auto" measures the machine and the model's layers (collective over `world`), prints its choice
// on `err` (rank 0) and, with explain, the table on `out` (rank 0). Throws GridError (one line, the
// same on every rank) for a grid that does not parse or whose product is not the number of ranks, and
// for "auto" on a CUDA run (`device`): the model measures the CPU backend's layers and MPI, not a GPU.
// `optimizer` is the run's (its state per parameter, how it cuts sharded parts, and the trials' update).
ResolvedGrid resolve_grid(const GridOptions& grid, const std::string& model_name, ModelOptions model_options,
                          int threads, const OptimizerOptions& optimizer, Device device, Communicator& world,
                          std::ostream& out, std::ostream& err);

// A GridError, which every rank finds the same at the same point: rank 0 writes its one line on `err`, then a
// collective on `world`, so that no rank exits (mpirun then stops the rest) before that line is out.
void report_grid_error(const GridError& error, Communicator& world, std::ostream& err);

// Any other error of one rank (a device, a file, a failed call): its one line on `err` (a single
// write), then MPI_Abort when there are other ranks, which would otherwise wait in a collective.
// Returns the exit code, 1, where there are none.
int report_error_and_abort(const std::exception& error, Communicator& world, std::ostream& err);

// Whether a step that every rank of `world` ran failed anywhere: `error` is this rank's (nullptr when its step
// went through). A collective over `world`; when some rank's step threw, every rank throws GridError with the
// message of the lowest such rank (sent to the others), so that rank 0 prints it once for the whole job and every
// rank exits cleanly (report_grid_error). Returns when no rank's step threw.
void agree_on_failure(Communicator& world, const std::exception* error);

// Sends `text` from rank `root` of `world` to every rank (its length, then its bytes); a collective.
void broadcast_string(Communicator& world, std::string& text, int root = 0);

// Runs `step` on this rank, then agrees with every rank of `world` whether it failed anywhere (agree_on_failure):
// an error that every rank finds alike (the data's layout, a model that cannot take the input, too few samples)
// and one that only some ranks find (a file one rank reads) both end the job with one line from rank 0 and no
// MPI_Abort. `step` must call no collective that a rank whose step threw would skip: the others would wait
// in it. Returns what `step` returns.
inline const std::runtime_error kUnknownError("an error that is not a std::exception");

template <typename Step>
auto agree_on_errors(Communicator& world, Step&& step) {
  using Result = std::invoke_result_t<Step&>;
  if constexpr (std::is_void_v<Result>) {
    try {
      step();
    } catch (const std::exception& e) {
      agree_on_failure(world, &e);
    } catch (...) {  // not one of ours: it must still reach the collective, or the other ranks wait there
      agree_on_failure(world, &kUnknownError);
    }
    agree_on_failure(world, nullptr);
  } else {
    std::optional<Result> result;
    try {
      result.emplace(step());
    } catch (const std::exception& e) {
      agree_on_failure(world, &e);
    } catch (...) {
      agree_on_failure(world, &kUnknownError);
    }
    agree_on_failure(world, nullptr);
    return std::move(*result);
  }
}

// With --trainers K, each trainer's ranks run the grid: an explicit --grid (not auto) must have ranks / K ranks.
// Throws GridError saying so (the same on every rank); `trainers` 1 is the plain check_grid_ranks.
void check_trainer_grid(const GridOptions& grid, const std::string& model_name, int trainers, int trainer_ranks);

// --benchmark N on a grid: synthetic slabs for every rank, one warm-up step, N timed training steps
// (split forward, loss, backward, gradient allreduce, the optimizer's update) and N timed inference forwards, on the
// backend --device picks (a CUDA run exchanges halos and sums gradients over NCCL). Rank 0 prints the
// same line as benchmark_command ("train: X samples/s, inference: Y samples/s, device: D", global
// samples) and on `err` a details line with the step time and the peak RSS (max over ranks).
// With more than one rank and no --grid the ranks run plain data parallelism (--grid S,1,1,1 for S ranks).
// `tournament` is --trainers and the rest: --explain plans each trainer's grid on its ranks as training
// does; --benchmark times one grid and refuses --trainers > 1 (GridError).
int grid_benchmark_command(const BenchmarkOptions& options, const GridOptions& grid,
                           const TournamentOptions& tournament, Communicator& world, std::ostream& out,
                           std::ostream& err);

}  // namespace fanstore::trainer
