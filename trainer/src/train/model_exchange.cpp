// Model state capture/install for the tournament's exchange, and its chunked nonblocking transfer.
#include "trainer/model_exchange.hpp"

#include <xxhash.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "trainer/backend.hpp"

namespace fanstore::trainer {
namespace {

constexpr std::size_t kChunkFloats = std::size_t{1} << 24;  // 64 MiB per message
constexpr int kFirstTag = 7000;                             // tags kFirstTag + chunk

std::size_t state_size(const Model& model, const Optimizer& optimizer, bool with_optimizer) {
  const ParameterTable& t = model.parameters();
  std::size_t n = t.parameter_count() + t.buffer_count();
  // A sharded optimizer's part: the other trainer's rank at the same place holds the same part.
  if (with_optimizer) n += optimizer.state().size() * optimizer.part().size() + 2;
  return n;
}

}  // namespace

std::vector<float> capture_state(const Model& model, const Optimizer& optimizer, bool with_optimizer) {
  const ParameterTable& t = model.parameters();
  std::vector<float> state = t.read(Arena::Values);
  const std::vector<float> buffers = t.read(Arena::Buffers);
  state.reserve(state_size(model, optimizer, with_optimizer));
  state.insert(state.end(), buffers.begin(), buffers.end());
  if (with_optimizer) {
    for (const auto& [name, arena] : optimizer.state()) {
      const Tensor host = t.backend().to_host(arena);
      state.insert(state.end(), host.data(), host.data() + host.numel());
    }
    // The step count (Adam's bias correction): its low 24 bits and the rest, each exact in a float.
    const std::uint64_t steps = optimizer.steps_taken();
    state.push_back(static_cast<float>(steps & 0xFFFFFF));
    state.push_back(static_cast<float>(steps >> 24));
  }
  return state;
}

void install_state(const std::vector<float>& state, Model& model, Optimizer& optimizer, bool with_optimizer) {
  if (state.size() != state_size(model, optimizer, with_optimizer))
    throw std::invalid_argument("model state of " + std::to_string(state.size()) + " floats does not fit this model (" +
                                std::to_string(state_size(model, optimizer, with_optimizer)) + ")");
  ParameterTable& t = model.parameters();
  const auto at = [&](std::size_t offset) { return state.begin() + static_cast<std::ptrdiff_t>(offset); };
  std::size_t offset = 0;
  t.write(Arena::Values, std::vector<float>(at(0), at(t.parameter_count())));
  offset += t.parameter_count();
  t.write(Arena::Buffers, std::vector<float>(at(offset), at(offset + t.buffer_count())));
  offset += t.buffer_count();
  if (!with_optimizer) return;
  for (auto& [name, arena] : optimizer.state()) {
    const auto n = static_cast<std::size_t>(arena.numel());
    std::vector<float> host(at(offset), at(offset + n));
    t.backend().copy(Tensor::view(arena.shape(), host.data()), arena);
    offset += n;
  }
  optimizer.set_steps_taken(static_cast<std::uint64_t>(state[offset]) |
                            (static_cast<std::uint64_t>(state[offset + 1]) << 24));
}

std::uint64_t state_hash(const std::vector<float>& state) {
  return XXH3_64bits(state.data(), state.size() * sizeof(float));
}

StateTransfer::StateTransfer(Communicator& comm, int send_to, const std::vector<float>& out, int receive_from,
                             std::vector<float>& in)
    : batch_(comm.start_messages()) {
  for (std::size_t begin = 0, tag = kFirstTag; send_to >= 0 && begin < out.size(); begin += kChunkFloats, ++tag)
    batch_->send(send_to, out.data() + begin, std::min(kChunkFloats, out.size() - begin), static_cast<int>(tag));
  for (std::size_t begin = 0, tag = kFirstTag; receive_from >= 0 && begin < in.size(); begin += kChunkFloats, ++tag)
    batch_->receive(receive_from, in.data() + begin, std::min(kChunkFloats, in.size() - begin), static_cast<int>(tag));
}

void StateTransfer::wait() { batch_->wait(); }

}  // namespace fanstore::trainer
