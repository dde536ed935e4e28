// The performance model that picks a sample x spatial grid (after Dryden et al., IPDPS'19): per-layer
// compute measured on this machine for each local slab shape, halo exchanges and reductions costed
// with a measured latency/bandwidth (alpha-beta), overlap of the halo with the interior and of the
// gradient allreduce with backward, and the memory each rank needs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/distributed.hpp"
#include "trainer/distributed_grid.hpp"
#include "trainer/distributed_halo.hpp"
#include "trainer/model.hpp"

namespace fanstore::trainer {

// Measured costs of moving bytes on this machine (between the ranks of this run).
struct MachineCosts {
  double latency_s = 0;          // alpha: half a round trip of a tiny message
  double bandwidth_bytes_s = 1;  // beta: point-to-point bandwidth of large messages
  double copy_bytes_s = 1;       // local memory copies (halo packing, piece assembly)

  double message(double bytes) const { return latency_s + bytes / bandwidth_bytes_s; }
  // Ring allreduce over `ranks`: 2(p-1) messages of bytes/p each way, plus the additions.
  double allreduce(int ranks, double bytes) const;
  // Ring all-gather of `bytes` in equal parts: p-1 messages of bytes/p.
  double allgather(int ranks, double bytes) const;
  double copy(double bytes) const { return bytes / copy_bytes_s; }
};

// Collective over `world`: ranks 0 and 1 ping-pong (8 B and 4 MiB), every rank times a 32 MiB copy;
// every rank gets rank 0's figures. One rank: no messages, only the copy.
MachineCosts measure_machine_costs(Communicator& world);
// The bandwidth that a `bytes` message taking `large_s` against a tiny one's `small_s` shows: the fit
// bytes / (large - small), with at least half of large for the transfer (a partner descheduled under load
// makes the two alike).
double fit_bandwidth(double small_s, double large_s, double bytes);

struct LayerCost {
  double forward_s = 0, backward_s = 0;
  // The most host tensor bytes the layer held for a moment beyond what it returned and keeps (a weight in
  // the kernel's layout, a blocked copy of a gradient), in forward and in backward.
  double forward_scratch_bytes = 0, backward_scratch_bytes = 0;
};

// Forward + backward time of one node of `model` on given local input shapes, measured the first
// time each (node, shapes) is asked for and remembered. `model` is a separate instance built for
// timing (its layers are run on slab shapes, which would disturb a training model's saved state).
class LayerTimer {
 public:
  explicit LayerTimer(Model& model) : model_(model) {}
  LayerCost measure(NodeId node, const std::vector<Shape>& inputs);
  // One piece of a split convolution or pooling with n samples: the kernel the run makes for it (its
  // input box and padding), forward and backward (data and weights).
  LayerCost measure_piece(NodeId node, std::int64_t n, const WindowPiece& piece);
  // Timings measured elsewhere (another rank) for the same key.
  void remember(const std::string& key, const LayerCost& cost) { cache_[key] = cost; }
  static std::string key(NodeId node, const std::vector<Shape>& inputs);
  static std::string piece_key(NodeId node, std::int64_t n, const WindowPiece& piece);
  const std::map<std::string, LayerCost>& cache() const { return cache_; }

 private:
  Model& model_;
  std::map<std::string, LayerCost> cache_;
};

struct PerformanceModelOptions {
  std::int64_t global_batch = 1;    // samples per step over all sample groups (each gets global/S)
  int optimizer_states = 1;         // floats per parameter besides value and gradient (SGD 1, Adam 2)
  bool whole_tensor_parts = false;  // sharded parts cut between tensors (LARS), so uneven
  bool sync_bn = false;             // batch-norm statistics over every rank
  bool overlap = true;              // interior computed while halos travel
  bool shard_state = true;          // optimizer state and gradients split over the spatial group (ZeRO stage 2)
  bool shard_weights = false;       // with shard_state, the weights too, gathered per layer (stage 3)
  double base_memory_bytes = 0;     // what a rank holds before the model (runtime, libraries): the runtime's least
};

struct GridPrediction {
  GridShape grid;
  std::int64_t batch_per_group = 0;
  std::string invalid;   // why this grid cannot run (empty: it can)
  double compute_s = 0;  // forward + backward of the slowest rank's slabs (each piece's kernel where the run cuts one)
  double halo_s = 0;     // halo and reverse-halo time not hidden behind computation
  double redistribution_s = 0;  // moving tensors between layers split differently, and their gradients back
  double copy_s = 0;            // packing, assembling haloed inputs and output pieces
  double reduction_s = 0;       // statistics, global pooling, dense-head partial sums, loss
  double allreduce_s = 0;       // gradient allreduce not hidden behind backward, and the gather of sharded updates
  double step_s = 0;
  double measured_s = 0;        // a tried grid's measured step (--grid auto tries the best predictions); 0 if not tried
  double memory_bytes = 0;      // per rank
  double activation_bytes = 0;  // of memory_bytes: the activations at their peak (the input slab apart)
  double runtime_bytes = 0;     // of memory_bytes: the runtime's own (runtime_rss_bytes, at least the base)
  double halo_bytes = 0;        // received per step by the busiest rank (forward + reverse)
  double allreduce_bytes = 0;   // gradient bytes each rank reduces per step
  // Split layers predicted faster as one kernel after their halo than in overlapping pieces (the run
  // follows this: DistributedOptions::one_kernel_layers).
  std::vector<std::string> one_kernel_layers;
  double samples_per_s() const { return step_s > 0 ? static_cast<double>(grid.samples * batch_per_group) / step_s : 0; }
};

// Whether cutting a split layer into pieces to compute its interior while the halo travels pays: the
// pieces' kernels, the transfer the interior's forward does not hide and assembling the output against
// one kernel after the whole transfer (the reverse halo overlaps the weight gradient either way).
bool pieces_pay(const LayerCost& one_kernel, const LayerCost& pieces, double interior_forward_s, double transfer_s,
                double assembly_s);

// Every grid with `ranks` ranks for a model with `spatial_rank` spatial axes (sample groups first,
// then the spatial splits in row-major order of their factors).
std::vector<GridShape> candidate_grids(int ranks, int spatial_rank);

// Predicts each grid. Layer timings are measured by all ranks of `world` together (each a share of the
// distinct (layer, slab shape) pairs, so the machine is as busy as during training), then shared.
// `timing_model` is a separate instance of the model (any batch; see LayerTimer).
std::vector<GridPrediction> predict_grids(Model& timing_model, const std::vector<GridShape>& grids,
                                          const PerformanceModelOptions& options, const MachineCosts& costs,
                                          Communicator& world);

// The valid grid with the smallest predicted step time (ties: fewer spatial ranks); -1 if none.
int best_grid(const std::vector<GridPrediction>& predictions);

// The --explain table: one row per grid, the chosen one marked.
std::string explain_table(const std::vector<GridPrediction>& predictions, const MachineCosts& costs, int chosen);

// The peak resident set of this process (getrusage), in bytes.
double peak_rss_bytes();
// Resident bytes now, less the host tensors' blocks (in use or kept for reuse): the runtime's own.
double runtime_rss_bytes();
// The peak virtual size (VmPeak of /proc/self/status: what `ulimit -v` limits), in bytes; 0 if unknown.
double peak_virtual_bytes();

}  // namespace fanstore::trainer
