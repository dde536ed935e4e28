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

void HaloExchange::start(const Tensor& owned) {
  if (messages_) throw std::logic_error("halo exchange: start() while another exchange is in flight");
  batch_ = owned.shape()[0];
  channels_ = owned.shape()[1];
  messages_ = comm_.start_messages();
  receive_buffers_.clear();
  send_buffers_.clear();
  // Receives first, so that a neighbour's send finds its match posted.
  for (const auto& piece : plan_.receive) {
    receive_buffers_.push_back(backend_.zeros(shape_of(piece.box)));
    messages_->receive(piece.peer, receive_buffers_.back().data(), receive_buffers_.back().capacity(), 2 * tag_);
  }
  for (const auto& piece : plan_.send) {
    send_buffers_.push_back(backend_.zeros(shape_of(piece.box)));
    copy_region(backend_, owned, plan_.owned, send_buffers_.back(), piece.box, piece.box, false);
    messages_->send(piece.peer, send_buffers_.back().data(), send_buffers_.back().capacity(), 2 * tag_);
  }
}

void HaloExchange::finish(const Tensor& owned, Tensor& local) {
  if (!messages_) throw std::logic_error("halo exchange: finish() without start()");
  if (!local.defined()) local = backend_.zeros(shape_of(plan_.local));
  copy_region(backend_, owned, plan_.owned, local, plan_.local, plan_.owned.intersect(plan_.local), false);
  messages_->wait();
  messages_.reset();
  for (std::size_t i = 0; i < plan_.receive.size(); ++i)
    copy_region(backend_, receive_buffers_[i], plan_.receive[i].box, local, plan_.local, plan_.receive[i].box, false);
  receive_buffers_.clear();
  send_buffers_.clear();
}

Tensor HaloExchange::exchange(const Tensor& owned) {
  Tensor local;
  start(owned);
  finish(owned, local);
  return local;
}

void HaloExchange::start_reverse(const Tensor& local_gradient) {
  if (messages_) throw std::logic_error("halo exchange: start_reverse() while another exchange is in flight");
  batch_ = local_gradient.shape()[0];
  channels_ = local_gradient.shape()[1];
  messages_ = comm_.start_messages();
  receive_buffers_.clear();
  send_buffers_.clear();
  // The reverse of the forward: what this rank sent comes back as gradient, what it received goes home.
  for (const auto& piece : plan_.send) {
    receive_buffers_.push_back(backend_.zeros(shape_of(piece.box)));
    messages_->receive(piece.peer, receive_buffers_.back().data(), receive_buffers_.back().capacity(), 2 * tag_ + 1);
  }
  for (const auto& piece : plan_.receive) {
    send_buffers_.push_back(backend_.zeros(shape_of(piece.box)));
    copy_region(backend_, local_gradient, plan_.local, send_buffers_.back(), piece.box, piece.box, false);
    messages_->send(piece.peer, send_buffers_.back().data(), send_buffers_.back().capacity(), 2 * tag_ + 1);
  }
}

void HaloExchange::finish_reverse(const Tensor& local_gradient, Tensor& owned_gradient) {
  if (!messages_) throw std::logic_error("halo exchange: finish_reverse() without start_reverse()");
  if (!owned_gradient.defined()) owned_gradient = backend_.zeros(shape_of(plan_.owned));
  copy_region(backend_, local_gradient, plan_.local, owned_gradient, plan_.owned, plan_.owned.intersect(plan_.local), false);
  messages_->wait();
  messages_.reset();
  for (std::size_t i = 0; i < plan_.send.size(); ++i)
    copy_region(backend_, receive_buffers_[i], plan_.send[i].box, owned_gradient, plan_.owned, plan_.send[i].box, true);
  receive_buffers_.clear();
  send_buffers_.clear();
}

Tensor HaloExchange::reverse(const Tensor& local_gradient) {
  Tensor owned;
  start_reverse(local_gradient);
  finish_reverse(local_gradient, owned);
  return owned;
}

bool HaloExchange::test() { return messages_ ? messages_->test() : true; }

}  // namespace fanstore::trainer
