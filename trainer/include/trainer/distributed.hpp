// Data parallelism: a communicator (MPI or a single process) and the bucketed gradient allreduce
// that starts each bucket from the backward hook, so communication overlaps computation.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "trainer/layer.hpp"
#include "trainer/parameters.hpp"

namespace fanstore::trainer {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts an in-place sum over ranks of data[0, n) (MPI_Iallreduce); finished by wait_all().
  virtual void start_sum(float* data, std::size_t n) = 0;
  // Lets started sums progress (MPI only progresses inside MPI calls); returns true when all are done.
  virtual bool poll() = 0;
  virtual void wait_all() = 0;
  // Blocking in-place sum (metrics, losses).
  virtual void sum(double* data, std::size_t n) = 0;
  // Blocking: true on every rank when any rank passes true (one rank's bad input stops all).
  virtual bool any(bool flag) = 0;
  virtual void barrier() = 0;
  // Ends every rank (an error on one rank would otherwise leave the others waiting in a collective).
  [[noreturn]] virtual void abort(int code) = 0;
};

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
  GradientAllreduce(Communicator& comm, ParameterTable& table, std::size_t bucket_bytes = 25u << 20);

  void begin_step();
  // Model::GradientReadyHook target.
  void on_layer_ready(const Layer& layer);
  // Starts the buckets not yet started, waits for all and divides by the number of ranks.
  void finish();

  std::size_t bucket_count() const { return buckets_.size(); }
  // Buckets started from the hook (before backward returned) in the last step: the overlap.
  std::size_t started_during_backward() const { return started_in_backward_; }

 private:
  struct Bucket {
    std::size_t begin = 0, end = 0;  // floats in the gradient arena
  };
  void start_ready(std::size_t ready_from);

  Communicator& comm_;
  ParameterTable& table_;
  std::vector<Bucket> buckets_;  // reverse order: buckets_[0] holds the last parameters
  std::size_t next_bucket_ = 0;
  std::size_t ready_from_ = 0;
  std::size_t started_in_backward_ = 0;
};

}  // namespace fanstore::trainer
