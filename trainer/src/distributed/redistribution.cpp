// Redistribution between layers split differently: the tensor moves from its producer's split to the
// split its consumer reads, and the gradient comes back the same way in reverse. Each direction is a
// HaloExchange over a plan that says which parts each rank receives and sends.
#include "split_ops.hpp"

namespace fanstore::trainer {

Redistribution::Redistribution(Backend& backend, Communicator& spatial, const Partition& from, const Partition& to,
                               const std::vector<int>& coords, int tag)
    : backend_(backend),
      forward_(backend, spatial, make_redistribution_plan(from, to, coords), tag),
      backward_(backend, spatial, make_redistribution_plan(to, from, coords), tag + 1) {}

Tensor Redistribution::forward(const Tensor& x) { return forward_.exchange(backend_.to_plain(x)); }

Tensor Redistribution::backward(const Tensor& dy) { return backward_.exchange(backend_.to_plain(dy)); }

}  // namespace fanstore::trainer
