// Data parallelism: a communicator (MPI or a single process) and the bucketed gradient allreduce
// that starts each bucket from the backward hook, so communication overlaps computation.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "trainer/layer.hpp"
#include "trainer/parameters.hpp"

namespace fanstore::trainer {

// A set of point-to-point messages that travel together (one halo exchange): post every send and
// receive, compute something else, then wait. Buffers must stay untouched until wait() returns.
// MPI posts each message at once (MPI_Isend/MPI_Irecv); a batched transport (NCCL's group calls)
// may hold them until the first test() or wait().
class MessageBatch {
 public:
  virtual ~MessageBatch() = default;
  // `tag` tells apart messages between the same two ranks that are in flight at the same time.
  virtual void send(int peer, const float* data, std::size_t count, int tag) = 0;
  virtual void receive(int peer, float* data, std::size_t count, int tag) = 0;
  // Lets the messages progress (MPI only progresses inside MPI calls); true when all are done.
  virtual bool test() = 0;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts an in-place sum over ranks of data[0, n) (MPI_Iallreduce); finished by wait_all().
  virtual void start_sum(float* data, std::size_t n) = 0;
  // Starts a sum over ranks of data[0, counts[0] + ... + counts[size-1]) of which this rank needs only its
  // counts[rank()] floats, those after the counts before its own: once finished (like start_sum) they hold
  // the sum, and the rest of `data` is undefined. By default the whole sum (start_sum); a communicator
  // with a cheaper uneven reduce-scatter (NCCL) overrides it.
  virtual void start_sum_scatter(float* data, const std::vector<std::size_t>& counts) {
    std::size_t total = 0;
    for (auto n : counts) total += n;
    start_sum(data, total);
  }
  // Lets started sums progress (MPI only progresses inside MPI calls); returns true when all are done.
  virtual bool poll() = 0;
  // At most this many bytes of started sums should be in flight at once (0: no limit): Open MPI's
  // nonblocking allreduce keeps a temporary copy of each message until it completes.
  virtual std::size_t sum_bytes_in_flight() const { return 0; }
  virtual void wait_all() = 0;
  // Blocking in-place sums and maxima (statistics, losses, metrics, memory).
  virtual void sum(double* data, std::size_t n) = 0;
  virtual void sum(float* data, std::size_t n) = 0;
  virtual void max(double* data, std::size_t n) = 0;
  // Blocking, in place (MPI_Allgatherv): rank r's counts[r] floats, at the offset of the counts before
  // its own, go to every rank.
  virtual void gather(float* data, const std::vector<std::size_t>& counts) = 0;
  // Blocking: every rank gets root's `bytes` bytes (decisions only rank 0 can take, e.g. resuming).
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // Point-to-point messages with the ranks of this communicator.
  virtual std::unique_ptr<MessageBatch> start_messages() = 0;
  // A communicator per `color` (MPI_Comm_split): ranks ordered by `key`. It must be destroyed before
  // the communicator it came from.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every rank (an error on one rank would otherwise leave the others waiting in a collective).
  [[noreturn]] virtual void abort(int code) = 0;
};

// Sums a plain F32 or F64 tensor over the ranks of `comm`, in place, where it lives: host memory
// over the communicator's host path (MPI), device memory over a communicator that takes device
// memory (NCCL: make_device_communicator), so a device tensor never leaves the device. Throws
// std::invalid_argument for another type or a non-plain tensor.
void sum_tensor(Tensor& t, Communicator& comm);

// MPI when the process was started by a launcher (mpirun sets OMPI_COMM_WORLD_SIZE, PMI_SIZE, ...),
// otherwise a one-rank communicator without MPI at all: a plain run (also under `fanstore run`)
// needs no MPI runtime. Must be called once, before any thread is started.
std::unique_ptr<Communicator> make_communicator(int* argc, char*** argv);
std::unique_ptr<Communicator> make_single_process_communicator();

// What a training step needs of the gradient averaging: started from the backward hook, so that it
// overlaps backward, and finished before the optimizer.
class GradientReduction {
 public:
  virtual ~GradientReduction() = default;
  virtual void begin_step() = 0;
  // Model::GradientReadyHook target.
  virtual void on_layer_ready(const Layer& layer) = 0;
  // Starts what is not started yet, waits for all and divides by the number of replicas.
  virtual void finish() = 0;
  // Messages per step (buckets, or parameter tensors), and those started from the hook (before backward
  // returned) in the last step: the overlap.
  virtual std::size_t bucket_count() const = 0;
  virtual std::size_t started_during_backward() const = 0;
};

// Gradient averaging in buckets of about `bucket_bytes`, cut at parameter boundaries in reverse
// declaration order (= reverse layer order, the order backward produces them). Parameters are
// declared in graph order, so once backward has finished a layer, every parameter at or after
// that layer's first offset is final; each bucket inside that suffix is started at once.
class GradientAllreduce final : public GradientReduction {
 public:
  // The sum over `comm` is divided by `replicas`: the number of ranks that each computed a whole
  // gradient (0 = comm.size(), plain data parallelism). Under a sample x spatial grid the ranks of one
  // spatial group each hold a part of their group's gradient, so replicas = the number of sample groups.
  GradientAllreduce(Communicator& comm, ParameterTable& table, std::size_t bucket_bytes = 25u << 20,
                    std::size_t replicas = 0);

  void begin_step() override;
  void on_layer_ready(const Layer& layer) override;
  void finish() override;
  std::size_t bucket_count() const override { return buckets_.size(); }
  std::size_t started_during_backward() const override { return started_in_backward_; }

 private:
  struct Bucket {
    std::size_t begin = 0, end = 0;  // floats in the gradient arena
  };
  struct Piece {
    std::size_t begin = 0, end = 0;
    bool first_of_bucket = false;
  };
  void start_ready(std::size_t ready_from);
  // Starts queued pieces as the communicator's in-flight limit allows: a new wave once the previous one
  // is done (`block`: waits for each, until every piece is started).
  void pump(bool block);

  Communicator& comm_;
  ParameterTable& table_;
  std::vector<Bucket> buckets_;  // reverse order: buckets_[0] holds the last parameters
  std::size_t replicas_;
  std::size_t piece_floats_;  // the communicator's in-flight limit, in floats (max: none)
  std::deque<Piece> queued_;  // ready, not started, in reverse arena order
  std::size_t next_bucket_ = 0;
  std::size_t ready_from_ = 0;
  std::size_t started_in_backward_ = 0;
  bool in_backward_ = false;
};

// ZeRO stage 2 over a spatial group whose optimizer state is sharded (Optimizer::shard_over): the table
// keeps the gradients of this rank's part only (ParameterTable::keep_gradient_part). Each parameter's
// gradient, once its layer's backward is done, is summed over `group` for the ranks whose parts it
// covers (start_sum_scatter), the own part copied into the kept gradients and the tensor released;
// finish() then sums the own part over `replicas` (the ranks at the same place in the other sample
// groups; nullptr with one sample group) and divides by their number. Every rank of the group reduces
// the same parameters in the same order.
class GradientReduceScatter final : public GradientReduction {
 public:
  // The sums go in pieces of at most this much: MPI keeps a copy of each sum in flight, and the first
  // ones start at the beginning of backward, where the activations peak.
  static constexpr std::size_t kPieceBytes = 1u << 20;
  // `parts`: every rank of `group`'s part of the arena, in its rank order.
  GradientReduceScatter(Communicator& group, Communicator* replicas, ParameterTable& table,
                        std::vector<ArenaPart> parts);
  ~GradientReduceScatter() override;

  void begin_step() override;
  void on_layer_ready(const Layer& layer) override;
  void finish() override;
  std::size_t bucket_count() const override { return table_.parameters().size(); }
  std::size_t started_during_backward() const override { return started_in_backward_; }

 private:
  void start(ParameterHandle h);
  // Releases the gradients in flight once their sums are done (`wait`: waits for them).
  void release(bool wait);

  Communicator& group_;
  Communicator* replicas_;
  ParameterTable& table_;
  std::vector<ArenaPart> parts_;
  ArenaPart own_;
  std::vector<bool> started_;  // per parameter, this step
  struct OwnPiece {
    const float* sum;           // in a gradient in flight: this rank's part of a piece, summed once finished
    std::size_t offset, count;  // where it goes in the kept part
  };
  std::vector<Tensor> in_flight_;  // gradients being summed: released once every started sum is done
  std::vector<OwnPiece> own_pieces_;
  std::size_t in_flight_bytes_ = 0;
  std::size_t bound_bytes_ = 4u << 20;  // of gradients in flight: 4 MiB, or the largest tensor alone
  std::size_t started_in_backward_ = 0;
  bool in_backward_ = false;
};

class Optimizer;    // trainer/optim.hpp
class ProcessGrid;  // trainer/distributed_grid.hpp

// The reduction a training step uses: ZeRO stage 2 over the grid's spatial group when the optimizer is
// sharded over it, else the bucketed allreduce over `world` divided by `replicas`.
std::unique_ptr<GradientReduction> make_gradient_reduction(Communicator& world, ProcessGrid* grid,
                                                           ParameterTable& table, const Optimizer& optimizer,
                                                           std::size_t bucket_bytes, std::size_t replicas);

}  // namespace fanstore::trainer
