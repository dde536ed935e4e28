// Communicators: MPI (nonblocking allreduce for gradients, point-to-point for halos, sub-communicators
// for process grids) and the single-process stand-in.
// The C API only: Open MPI's deprecated C++ bindings would otherwise need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/distributed.hpp"

namespace fanstore::trainer {
namespace {

class NoMessages final : public MessageBatch {
 public:
  void send(int peer, const float*, std::size_t, int) override { no_peer(peer); }
  void receive(int peer, float*, std::size_t, int) override { no_peer(peer); }
  bool test() override { return true; }
  void wait() override {}

 private:
  [[noreturn]] static void no_peer(int peer) {
    throw std::logic_error("point-to-point message to rank " + std::to_string(peer) + " on a one-rank communicator");
  }
};

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void start_sum(float*, std::size_t) override {}
  bool poll() override { return true; }
  void wait_all() override {}
  void sum(double*, std::size_t) override {}
  void sum(float*, std::size_t) override {}
  void max(double*, std::size_t) override {}
  void gather(float*, const std::vector<std::size_t>&) override {}
  void broadcast(void*, std::size_t, int) override {}
  std::unique_ptr<MessageBatch> start_messages() override { return std::make_unique<NoMessages>(); }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SingleProcess>(); }
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

// MPI_Iallreduce (libnbc) mallocs a copy of the whole message for its duration: the gradient buckets go in
// waves of at most this much, so that the copy does not add a model's worth of gradients to a rank's peak.
constexpr std::size_t kSumBytesInFlight = 4u << 20;

// MPI counts are int: larger transfers go in pieces.
constexpr std::size_t kMaxCount = static_cast<std::size_t>(INT_MAX);

int checked_count(std::size_t n) {
  if (n > kMaxCount) throw std::length_error("MPI message of " + std::to_string(n) + " elements exceeds INT_MAX");
  return static_cast<int>(n);
}

// Nonblocking operations in flight: MPI progresses them only inside MPI calls (test), wait ends them.
class Requests {
 public:
  MPI_Request* add() { return &requests_.emplace_back(); }
  bool test() {
    if (requests_.empty()) return true;
    int done = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
    if (done) requests_.clear();
    return done != 0;
  }
  void wait() {
    if (requests_.empty()) return;
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
  }

 private:
  std::vector<MPI_Request> requests_;
};

class MpiMessages final : public MessageBatch {
 public:
  explicit MpiMessages(MPI_Comm comm) : comm_(comm) {}
  // A batch abandoned by an exception must not leave MPI writing into freed buffers.
  ~MpiMessages() override { requests_.wait(); }
  void send(int peer, const float* data, std::size_t count, int tag) override {
    MPI_Isend(data, checked_count(count), MPI_FLOAT, peer, tag, comm_, requests_.add());
  }
  void receive(int peer, float* data, std::size_t count, int tag) override {
    MPI_Irecv(data, checked_count(count), MPI_FLOAT, peer, tag, comm_, requests_.add());
  }
  bool test() override { return requests_.test(); }
  void wait() override { requests_.wait(); }

 private:
  MPI_Comm comm_;
  Requests requests_;
};

class Mpi final : public Communicator {
 public:
  // The world communicator: initialises MPI and finalises it when destroyed.
  Mpi(int* argc, char*** argv) : comm_(MPI_COMM_WORLD), owns_runtime_(true) {
    int provided = 0;
    // Only the main thread calls MPI; the prefetch threads do file I/O only.
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  // A sub-communicator from split(); freed when destroyed.
  explicit Mpi(MPI_Comm comm) : comm_(comm), owns_runtime_(false) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~Mpi() override {
    wait_all();
    if (owns_runtime_) MPI_Finalize();
    else MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void start_sum(float* data, std::size_t n) override {
    MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(n), MPI_FLOAT, MPI_SUM, comm_, requests_.add());
  }
  // start_sum_scatter is the whole sum (MPI_Iallreduce): libnbc's MPI_Ireduce_scatter sums on rank 0
  // first, which then peaks above the others, and the blocking MPI_Reduce_scatter makes every rank wait
  // at every layer of backward (docs/performance.md, "Sharded gradients over MPI, measured alone").
  bool poll() override { return requests_.test(); }
  void wait_all() override { requests_.wait(); }
  std::size_t sum_bytes_in_flight() const override { return kSumBytesInFlight; }
  void sum(double* data, std::size_t n) override {
    MPI_Allreduce(MPI_IN_PLACE, data, checked_count(n), MPI_DOUBLE, MPI_SUM, comm_);
  }
  void sum(float* data, std::size_t n) override {
    MPI_Allreduce(MPI_IN_PLACE, data, checked_count(n), MPI_FLOAT, MPI_SUM, comm_);
  }
  void max(double* data, std::size_t n) override {
    MPI_Allreduce(MPI_IN_PLACE, data, checked_count(n), MPI_DOUBLE, MPI_MAX, comm_);
  }
  void gather(float* data, const std::vector<std::size_t>& counts) override {
    std::vector<int> sizes, offsets;
    std::size_t offset = 0;
    for (auto n : counts) {
      sizes.push_back(checked_count(n));
      offsets.push_back(checked_count(offset));
      offset += n;
    }
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, sizes.data(), offsets.data(), MPI_FLOAT, comm_);
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (std::size_t done = 0; done < bytes;) {
      const std::size_t piece = std::min(bytes - done, kMaxCount);
      MPI_Bcast(p + done, static_cast<int>(piece), MPI_BYTE, root, comm_);
      done += piece;
    }
  }
  std::unique_ptr<MessageBatch> start_messages() override { return std::make_unique<MpiMessages>(comm_); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color, key, &part);
    return std::make_unique<Mpi>(part);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

 private:
  MPI_Comm comm_;
  bool owns_runtime_;
  int rank_ = 0, size_ = 1;
  Requests requests_;
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
