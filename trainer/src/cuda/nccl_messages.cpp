// NCCL point-to-point batches for the halo exchange.
#include "cuda/nccl_messages.hpp"

namespace fanstore::trainer::cuda {

NcclMessages::NcclMessages(ncclComm_t comm, cudaStream_t stream, cudaStream_t compute)
    : comm_(comm), stream_(stream), compute_(compute) {
  FS_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  FS_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

NcclMessages::~NcclMessages() {
  // A batch dropped before wait() still must not free its events under running transfers.
  if (issued_) cudaEventSynchronize(done_);
  cudaEventDestroy(ready_);
  cudaEventDestroy(done_);
}

void NcclMessages::send(int peer, const float* data, std::size_t count) {
  if (issued_) throw CudaError("NcclMessages::send: the batch was already issued");
  messages_.push_back({true, peer, const_cast<float*>(data), count});
}

void NcclMessages::receive(int peer, float* data, std::size_t count) {
  if (issued_) throw CudaError("NcclMessages::receive: the batch was already issued");
  messages_.push_back({false, peer, data, count});
}

void NcclMessages::issue() {
  issued_ = true;
  // After the kernels that packed the send buffers (queued on the compute stream so far).
  FS_CHECK(cudaEventRecord(ready_, compute_));
  FS_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  if (!messages_.empty()) {
    FS_CHECK(ncclGroupStart());
    for (const auto& m : messages_) {
      if (m.send) FS_CHECK(ncclSend(m.data, m.count, ncclFloat, m.peer, comm_, stream_));
      else FS_CHECK(ncclRecv(m.data, m.count, ncclFloat, m.peer, comm_, stream_));
    }
    FS_CHECK(ncclGroupEnd());
  }
  FS_CHECK(cudaEventRecord(done_, stream_));
}

bool NcclMessages::test() {
  if (!issued_) issue();
  const cudaError_t status = cudaEventQuery(done_);
  if (status == cudaErrorNotReady) return false;
  FS_CHECK(status);
  return true;
}

void NcclMessages::wait() {
  if (!issued_) issue();
  FS_CHECK(cudaStreamWaitEvent(compute_, done_, 0));  // the unpacking kernels come after the messages
}

}  // namespace fanstore::trainer::cuda
