// fanstore-train's grid options: resolving --grid (a grid, "auto" with the performance model, or plain
// data parallelism), --explain, and --benchmark on a grid.
#pragma once

#include <cstdint>
#include <exception>
#include <iosfwd>
#include <string>
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

// --benchmark N on a grid: synthetic slabs for every rank, one warm-up step, N timed training steps
// (split forward, loss, backward, gradient allreduce, the optimizer's update) and N timed inference forwards, on the
// backend --device picks (a CUDA run exchanges halos and sums gradients over NCCL). Rank 0 prints the
// same line as benchmark_command ("train: X samples/s, inference: Y samples/s, device: D", global
// samples) and on `err` a details line with the step time and the peak RSS (max over ranks).
int grid_benchmark_command(const BenchmarkOptions& options, const GridOptions& grid, Communicator& world,
                           std::ostream& out, std::ostream& err);

}  // namespace fanstore::trainer
