// NCCL between the GPUs of a run: gradient buckets summed on a stream of their own, overlapped
// with backward (each bucket waits on the device for the kernels that produced it; the compute
// stream waits for all of them before the optimizer); blocking sums of device memory; the halo
// exchange's messages as NCCL send/receive batches; and the grid's sub-communicators by
// ncclCommSplit. Host values (losses, metrics, decisions) still go through the MPI communicator
// it wraps.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/nccl_messages.hpp"

namespace fanstore::trainer::cuda {
namespace {

bool on_device(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // a host pointer the runtime never saw: not device memory
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

class NcclMessageBatch final : public MessageBatch {
 public:
  NcclMessageBatch(ncclComm_t comm, cudaStream_t stream, cudaStream_t compute) : messages_(comm, stream, compute) {}
  // NCCL matches messages between two ranks in issue order; the halo engine's tags only separate
  // exchanges in flight, which are separate batches issued in the same order on every rank.
  void send(int peer, const float* data, std::size_t count, int) override { messages_.send(peer, data, count); }
  void receive(int peer, float* data, std::size_t count, int) override { messages_.receive(peer, data, count); }
  bool test() override { return messages_.test(); }
  void wait() override { messages_.wait(); }

 private:
  NcclMessages messages_;
};

class NcclCommunicator final : public Communicator {
 public:
  // A communicator over the ranks of `host`; rank 0's unique id travels through the host's sum.
  NcclCommunicator(Communicator& host, cudaStream_t compute) : host_(host), compute_(compute) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (host.rank() == 0) FS_CHECK(ncclGetUniqueId(&id));
    // 128 bytes as 32-bit integers, exact in doubles: rank 0 contributes them, the others zeros.
    constexpr std::size_t kWords = sizeof(ncclUniqueId) / sizeof(std::uint32_t);
    double words[kWords];
    for (std::size_t i = 0; i < kWords; ++i) {
      std::uint32_t w = 0;
      std::memcpy(&w, reinterpret_cast<const char*>(&id) + i * sizeof w, sizeof w);
      words[i] = host.rank() == 0 ? static_cast<double>(w) : 0.0;
    }
    host.sum(words, kWords);
    for (std::size_t i = 0; i < kWords; ++i) {
      const auto w = static_cast<std::uint32_t>(words[i]);
      std::memcpy(reinterpret_cast<char*>(&id) + i * sizeof w, &w, sizeof w);
    }
    const ncclResult_t made = ncclCommInitRank(&comm_, host.size(), id, host.rank());
    // Its most common cause, two ranks on one GPU (more ranks per node than GPUs), in the user's terms.
    if (made == ncclInvalidUsage)
      throw CudaError(
          "ncclCommInitRank: invalid usage, most often two ranks on one GPU (NCCL_DEBUG=WARN says "
          "\"Duplicate GPU detected\"): start at most as many ranks per node as GPUs (mpirun --map-by "
          "ppr:GPUS:node, srun --ntasks-per-node=GPUS --gpus-per-task=1), or use --device cpu");
    FS_CHECK(made);
    create_stream();
  }
  // A sub-communicator: owns its host part and an NCCL communicator split from the parent's, and
  // issues on the parent's stream. NCCL kernels block until their peers arrive, so operations of two
  // communicators in flight at once on two streams can deadlock (NCCL's "using multiple
  // communicators concurrently"); on one stream they run in issue order, which is the same program
  // order on every rank (halo batches, statistics sums, gradient buckets), so none waits on a peer
  // that waits on it. The halos then queue behind a bucket in flight; both still overlap compute.
  NcclCommunicator(std::unique_ptr<Communicator> host, ncclComm_t comm, cudaStream_t compute,
                   cudaStream_t parent_stream)
      : owned_host_(std::move(host)),
        host_(*owned_host_),
        compute_(compute),
        comm_(comm),
        stream_(parent_stream),
        owns_stream_(false) {
    create_events();
  }
  ~NcclCommunicator() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (comm_) ncclCommDestroy(comm_);
    if (ready_) cudaEventDestroy(ready_);
    if (done_) cudaEventDestroy(done_);
    if (stream_ && owns_stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }

  void start_sum(float* data, std::size_t n) override {
    after_compute();  // the bucket's gradients are final once the kernels queued so far have run
    FS_CHECK(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, stream_));
  }
  // NCCL's reduce-scatter takes equal parts: one reduce per rank to that rank, grouped, is the uneven one
  // (a part no rank has is skipped by every rank alike: the counts are the same everywhere).
  void start_sum_scatter(float* data, const std::vector<std::size_t>& counts) override {
    after_compute();
    FS_CHECK(ncclGroupStart());
    std::size_t offset = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      // In place on its root: the root's part of `data` gets the sum.
      if (counts[r] > 0)
        FS_CHECK(ncclReduce(data + offset, data + offset, counts[r], ncclFloat, ncclSum, static_cast<int>(r), comm_,
                            stream_));
      offset += counts[r];
    }
    FS_CHECK(ncclGroupEnd());
  }
  bool poll() override {
    const cudaError_t status = cudaStreamQuery(stream_);
    if (status == cudaErrorNotReady) return false;
    FS_CHECK(status);
    return true;
  }
  void wait_all() override {
    // A device-side dependency: the compute stream (the averaging, the optimizer) waits, the host does not.
    FS_CHECK(cudaEventRecord(done_, stream_));
    FS_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
  }
  // Blocking reductions: device memory over NCCL (then the host waits), host memory over MPI.
  void sum(double* data, std::size_t n) override {
    if (!on_device(data)) return host_.sum(data, n);
    after_compute();
    FS_CHECK(ncclAllReduce(data, data, n, ncclDouble, ncclSum, comm_, stream_));
    FS_CHECK(cudaStreamSynchronize(stream_));
  }
  void sum(float* data, std::size_t n) override {
    if (!on_device(data)) return host_.sum(data, n);
    after_compute();
    FS_CHECK(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, stream_));
    FS_CHECK(cudaStreamSynchronize(stream_));
  }
  void max(double* data, std::size_t n) override {
    if (!on_device(data)) return host_.max(data, n);
    after_compute();
    FS_CHECK(ncclAllReduce(data, data, n, ncclDouble, ncclMax, comm_, stream_));
    FS_CHECK(cudaStreamSynchronize(stream_));
  }
  // NCCL's all-gather takes equal parts: one broadcast per rank, grouped, is the uneven one.
  void gather(float* data, const std::vector<std::size_t>& counts) override {
    if (!on_device(data)) return host_.gather(data, counts);
    after_compute();
    FS_CHECK(ncclGroupStart());
    std::size_t offset = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      FS_CHECK(ncclBroadcast(data + offset, data + offset, counts[r], ncclFloat, static_cast<int>(r), comm_, stream_));
      offset += counts[r];
    }
    FS_CHECK(ncclGroupEnd());
    FS_CHECK(cudaStreamSynchronize(stream_));
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    if (!on_device(data)) return host_.broadcast(data, bytes, root);
    after_compute();
    FS_CHECK(ncclBroadcast(data, data, bytes, ncclChar, root, comm_, stream_));
    FS_CHECK(cudaStreamSynchronize(stream_));
  }
  std::unique_ptr<MessageBatch> start_messages() override {
    return std::make_unique<NcclMessageBatch>(comm_, stream_, compute_);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> host = host_.split(color, key);
    ncclComm_t comm = nullptr;
    FS_CHECK(ncclCommSplit(comm_, color, key, &comm, nullptr));
    return std::make_unique<NcclCommunicator>(std::move(host), comm, compute_, stream_);
  }

  [[noreturn]] void abort(int code) override {
    if (comm_) ncclCommAbort(comm_);
    host_.abort(code);
    std::exit(code);  // host_.abort does not return; this keeps [[noreturn]] honest to the compiler
  }

 private:
  void create_stream() {
    FS_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    create_events();
  }
  void create_events() {
    FS_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    FS_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  // What is issued on our stream next runs after the work queued so far on the compute stream.
  void after_compute() {
    FS_CHECK(cudaEventRecord(ready_, compute_));
    FS_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  }

  std::unique_ptr<Communicator> owned_host_;
  Communicator& host_;
  cudaStream_t compute_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = true;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Backend& backend) {
  return std::make_unique<NcclCommunicator>(host, stream_of(backend));
}

}  // namespace fanstore::trainer::cuda
