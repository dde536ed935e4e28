// A model's state as one host vector, and its transfer between two ranks (the tournament's exchange).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "trainer/distributed.hpp"
#include "trainer/model.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {

// Parameters, buffers (batch-norm running statistics) and, with `with_optimizer`, every optimizer
// state arena in Optimizer::state() order, then the optimizer's step count (exact in two floats).
std::vector<float> capture_state(const Model& model, const Optimizer& optimizer, bool with_optimizer);
// The reverse; throws std::invalid_argument when `state` does not have the model's size.
void install_state(const std::vector<float>& state, Model& model, Optimizer& optimizer, bool with_optimizer);
// XXH3 of the bytes: equal hashes on two trainers say they hold the same state.
std::uint64_t state_hash(const std::vector<float>& state);

// Sends `out` to rank `send_to` and receives `in` (already sized) from rank `receive_from` of `comm`
// (-1: no send, no receive), in chunks of at most 2^24 floats, without blocking: the caller scores
// its own model meanwhile, then wait()s.
class StateTransfer {
 public:
  StateTransfer(Communicator& comm, int send_to, const std::vector<float>& out, int receive_from,
                std::vector<float>& in);
  void wait();

 private:
  std::unique_ptr<MessageBatch> batch_;
};

}  // namespace fanstore::trainer
