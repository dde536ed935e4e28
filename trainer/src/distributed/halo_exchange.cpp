// The halo exchange engine: packs the boxes neighbours read, sends them with nonblocking
// point-to-point messages, unpacks the halos; in reverse, sends halo gradients home and adds them.
#include <stdexcept>

#include "trainer/distributed_halo.hpp"

namespace fanstore::trainer {

HaloExchange::HaloExchange(Backend& backend, Communicator& spatial, HaloPlan plan, int tag)
    : backend_(backend), comm_(spatial), plan_(std::move(plan)), tag_(tag % 16000) {}

Shape HaloExchange::shape_of(const SpatialBox& box) const {
  Shape s{batch_, channels_};
  for (auto e : box.extents()) s.dims.push_back(e);
  return s;
}

// Posts a receive per `incoming` piece, then packs each `outgoing` piece of `source` (which covers
// `source_box`) and sends it. Forward: in = the halo, out = what neighbours read of the slab; reverse:
// the other way round.
void HaloExchange::post(const std::vector<HaloPiece>& incoming, const std::vector<HaloPiece>& outgoing,
                        const Tensor& source, const SpatialBox& source_box, int tag) {
  if (messages_) throw std::logic_error("halo exchange: started while another exchange is in flight");
  batch_ = source.shape()[0];
  channels_ = source.shape()[1];
  messages_ = comm_.start_messages();
  receive_buffers_.clear();
  send_buffers_.clear();
  // Receives first, so that a neighbour's send finds its match posted.
  for (const auto& piece : incoming) {
    receive_buffers_.push_back(backend_.zeros(shape_of(piece.box)));
    messages_->receive(piece.peer, receive_buffers_.back().data(), receive_buffers_.back().capacity(), tag);
  }
  for (const auto& piece : outgoing) {
    send_buffers_.push_back(backend_.zeros(shape_of(piece.box)));
    copy_region(backend_, source, source_box, send_buffers_.back(), piece.box, piece.box, false);
    messages_->send(piece.peer, send_buffers_.back().data(), send_buffers_.back().capacity(), tag);
  }
  // A batched transport (NCCL) issues its messages on the first test: here, right after the packing,
  // so they travel while the caller computes the interior (MPI already started them).
  messages_->test();
}

// Fills `target` (covering `target_box`, allocated when undefined) with this rank's part of `source`
// (covering `source_box`), waits, and writes (or adds) each received `incoming` piece.
void HaloExchange::complete(const std::vector<HaloPiece>& incoming, const Tensor& source, const SpatialBox& source_box,
                            Tensor& target, const SpatialBox& target_box, bool accumulate) {
  if (!messages_) throw std::logic_error("halo exchange: finished without being started");
  if (!target.defined()) target = backend_.zeros(shape_of(target_box));
  copy_region(backend_, source, source_box, target, target_box, source_box.intersect(target_box), false);
  messages_->wait();
  messages_.reset();
  for (std::size_t i = 0; i < incoming.size(); ++i)
    copy_region(backend_, receive_buffers_[i], incoming[i].box, target, target_box, incoming[i].box, accumulate);
  receive_buffers_.clear();
  send_buffers_.clear();
}

void HaloExchange::start(const Tensor& owned) { post(plan_.receive, plan_.send, owned, plan_.owned, 2 * tag_); }

void HaloExchange::finish(const Tensor& owned, Tensor& local) {
  complete(plan_.receive, owned, plan_.owned, local, plan_.local, false);
}

Tensor HaloExchange::exchange(const Tensor& owned) {
  Tensor local;
  start(owned);
  finish(owned, local);
  return local;
}

// The reverse of the forward: what this rank sent comes back as gradient, what it received goes home.
void HaloExchange::start_reverse(const Tensor& local_gradient) {
  post(plan_.send, plan_.receive, local_gradient, plan_.local, 2 * tag_ + 1);
}

void HaloExchange::finish_reverse(const Tensor& local_gradient, Tensor& owned_gradient) {
  complete(plan_.send, local_gradient, plan_.local, owned_gradient, plan_.owned, true);
}

Tensor HaloExchange::reverse(const Tensor& local_gradient) {
  Tensor owned;
  start_reverse(local_gradient);
  finish_reverse(local_gradient, owned);
  return owned;
}

bool HaloExchange::test() { return messages_ ? messages_->test() : true; }

}  // namespace fanstore::trainer
