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

// Gradient averaging in buckets of about `bucket_bytes`, cut at parameter boundaries in reverse
// declaration order (= reverse layer order, the order backward produces them). Parameters are
// declared in graph order, so once backward has finished a layer, every parameter at or after
// that layer's first offset is final; each bucket inside that suffix is started at once.
class GradientAllreduce {
 public:
  // The sum over `comm` is divided by `replicas`: the number of ranks that each computed a whole
  // gradient (0 = comm.size(), plain data parallelism). Under a sample x spatial grid the ranks of one
  // spatial group each hold a part of their group's gradient, so replicas = the number of sample groups.
  GradientAllreduce(Communicator& comm, ParameterTable& table, std::size_t bucket_bytes = 25u << 20,
                    std::size_t replicas = 0);

  void begin_step();
  // Model::GradientReadyHook target.
  void on_layer_ready(const Layer& layer);
  // Starts the buckets not yet started, waits for all and divides by the number of replicas.
  void finish();

  std::size_t bucket_count() const { return buckets_.size(); }
  // Buckets started from the hook (before backward returned) in the last step: the overlap.
  std::size_t started_during_backward() const { return started_in_backward_; }

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

}  // namespace fanstore::trainer
