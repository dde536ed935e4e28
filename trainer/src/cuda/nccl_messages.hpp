// Point-to-point messages over NCCL for one halo exchange: the sends and receives are recorded and
// issued together (one ncclGroupStart/End) when the batch is first tested or waited on, on the
// communicator's stream after the compute stream's work so far (the packing kernels); wait() makes
// the compute stream wait for them (on the device). NCCL has no tags: messages between two ranks
// match in the order they are issued, which the halo engine keeps the same on every rank.
#pragma once

#include <cstddef>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace fanstore::trainer::cuda {

class NcclMessages {
 public:
  NcclMessages(ncclComm_t comm, cudaStream_t stream, cudaStream_t compute);
  ~NcclMessages();
  NcclMessages(const NcclMessages&) = delete;
  NcclMessages& operator=(const NcclMessages&) = delete;

  // `data`: device memory that stays untouched until wait() (the compute stream's later work waits).
  void send(int peer, const float* data, std::size_t count);
  void receive(int peer, float* data, std::size_t count);
  // Issues the batch the first time; true once every message arrived.
  bool test();
  void wait();

 private:
  struct Message {
    bool send;
    int peer;
    float* data;
    std::size_t count;
  };
  void issue();

  ncclComm_t comm_;
  cudaStream_t stream_, compute_;
  std::vector<Message> messages_;
  bool issued_ = false;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
};

}  // namespace fanstore::trainer::cuda
