// Communicators: MPI (nonblocking allreduce for gradients) and the single-process stand-in.
// The C API only: Open MPI's deprecated C++ bindings would otherwise need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "trainer/distributed.hpp"

namespace fanstore::trainer {
namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void start_sum(float*, std::size_t) override {}
  bool poll() override { return true; }
  void wait_all() override {}
  void sum(double*, std::size_t) override {}
  bool any(bool flag) override { return flag; }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

class Mpi final : public Communicator {
 public:
  Mpi(int* argc, char*** argv) {
    int provided = 0;
    // Only the main thread calls MPI; the prefetch threads do file I/O only.
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~Mpi() override {
    wait_all();
    MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void start_sum(float* data, std::size_t n) override {
    requests_.emplace_back();
    MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &requests_.back());
  }
  bool poll() override {
    if (requests_.empty()) return true;
    int done = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
    if (done) requests_.clear();
    return done != 0;
  }
  void wait_all() override {
    if (requests_.empty()) return;
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
  }
  void sum(double* data, std::size_t n) override {
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  bool any(bool flag) override {
    int value = flag ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return value != 0;
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

 private:
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> requests_;
};

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name)) return true;
  return false;
}

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() { return std::make_unique<SingleProcess>(); }

std::unique_ptr<Communicator> make_communicator(int* argc, char*** argv) {
  if (!launched_by_mpi()) return make_single_process_communicator();
  return std::make_unique<Mpi>(argc, argv);
}

}  // namespace fanstore::trainer
