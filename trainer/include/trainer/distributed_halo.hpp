// Halo exchange for spatially split tensors: which input positions a windowed layer (convolution,
// transposed convolution, pooling) reads, what each rank must receive from its neighbours (faces,
// edges and corners in 2D and 3D), the nonblocking exchange itself and its reverse (halo gradients
// sent back to their owners and added), and the split of a rank's output into an interior that needs
// no halo (computed while the halos travel) and the boundary pieces computed after they arrive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/distributed.hpp"
#include "trainer/distributed_grid.hpp"

namespace fanstore::trainer {

// Which input positions output positions read along one spatial axis (PyTorch semantics).
struct AxisWindow {
  std::int64_t extent = 1;  // dilation * (kernel - 1) + 1
  std::int64_t stride = 1;
  std::int64_t padding =
      0;  // padding_lo: zeros before the first position; for a transposed convolution, the output crop
  bool transposed = false;

  // Input positions that outputs [out.lo, out.hi) read, before clipping to the input: a direct window
  // may reach into the padding (< 0 or >= the input extent).
  Range reads(const Range& out) const;
};

// One AxisWindow per spatial axis (default-constructed: the identity window, extent 1 and stride 1, of an
// element-wise layer).
using Window = std::vector<AxisWindow>;
Window window_of(const ConvolutionSpec& spec);
Window window_of(const PoolingSpec& spec);

// The input box that a rank computing outputs `out` must hold: reads(out) clipped to the input volume.
SpatialBox input_box_for(const Window& window, const SpatialBox& out, const SpatialBox& input_volume);

// A part of one rank's computation: the outputs `out`, the input box `in` they read (clipped to the
// volume) and the per-side padding that makes a kernel on `in` produce exactly `out`: zero padding
// for a direct window (only where `in` meets the volume's edge), the output crop for a transposed one.
struct WindowPiece {
  SpatialBox out, in;
  std::vector<std::int64_t> pad_lo, pad_hi;
};
WindowPiece window_piece(const Window& window, const SpatialBox& out, const SpatialBox& input_volume);
// A convolution's or pooling's spec with a piece's padding: the kernel that computes that piece.
template <class Spec>
Spec with_padding_of(const WindowPiece& piece, Spec spec) {
  spec.padding_lo = piece.pad_lo;
  spec.padding_hi = piece.pad_hi;
  return spec;
}

// Splits a rank's outputs `out` into pieces: first the interior, whose inputs lie inside `owned` (no
// halo needed), then up to 2 per axis boundary pieces (onion order: the low and high slices of axis 0,
// then of axis 1 inside axis 0's interior, ...). Together they tile `out`. Without `split` (or with
// no interior) it is the single piece `out`.
std::vector<WindowPiece> window_pieces(const Window& window, const SpatialBox& out, const SpatialBox& owned,
                                       const SpatialBox& input_volume, bool split);

// Whether a split windowed layer computes its interior while its halo travels (interior + boundary
// pieces) instead of one kernel after the halo arrived: with --halo-overlap and a halo to wait for, and
// only where the input slab outweighs the weights (`weight_floats`, 0 for pooling), since each piece is
// a kernel of its own that reorders the weights on every call. The run and the performance model ask this.
bool overlaps_in_pieces(bool overlap, bool exchanges, std::int64_t slab_floats, std::int64_t weight_floats);

// A part of a halo: the box (global coordinates) and the spatial rank that sends or receives it.
struct HaloPiece {
  int peer = 0;
  SpatialBox box;
};

// One rank's halo exchange for one layer input.
struct HaloPlan {
  SpatialBox owned;                // this rank's slab of the input
  SpatialBox local;                // what the layer reads: input_box_for(window, this rank's outputs)
  std::vector<HaloPiece> receive;  // parts of `local` that neighbours own
  std::vector<HaloPiece> send;     // parts of `owned` that neighbours read
  bool exchanges() const { return !receive.empty() || !send.empty(); }
  std::int64_t halo_volume() const;  // positions received
  std::int64_t send_volume() const;  // positions sent
};

// The plan of the rank at `coords` for a layer with `window` whose input is split as `in` and its
// output as `out` (the same grid). Only nearest neighbours take part (the 3^d - 1 ranks around
// `coords`): throws std::invalid_argument if a rank reads beyond them, i.e. a halo wider than a slab.
HaloPlan make_halo_plan(const Window& window, const Partition& in, const Partition& out,
                        const std::vector<int>& coords);

// What the rank at `coords` receives and sends to turn a tensor split as `from` into the same tensor
// split as `to` (the same extents and grid; either may be coarser than the grid): as a HaloPlan whose
// `owned` is this rank's part under `from` and `local` its part under `to`. A part this rank holds is
// copied locally; any other comes from the replica with this rank's offset along each axis, so every
// replica of a coarse part serves a share of the receivers. Its backward is the plan from `to` to
// `from`: a replicated tensor's gradient is the same on every replica.
HaloPlan make_redistribution_plan(const Partition& from, const Partition& to, const std::vector<int>& coords);

// The first rank and axis where a halo is wider than the neighbour's slab, as a message, or "" if none.
std::string halo_width_problem(const Window& window, const Partition& in, const Partition& out);

// Copies (or adds) `region` (global coordinates) of src, a tensor (N, C, *src_box), into dst
// (N, C, *dst_box): Backend::copy_box with the boxes in global coordinates. Both plain, on `backend`;
// region must lie in both boxes.
void copy_region(Backend& backend, const Tensor& src, const SpatialBox& src_box, Tensor& dst, const SpatialBox& dst_box,
                 const SpatialBox& region, bool accumulate);

// The exchange engine for one HaloPlan over the spatial communicator. Forward: start() posts the
// receives and sends the parts of this rank's slab that the neighbours read; finish() assembles the
// local tensor (own part + halos). Backward: start_reverse() sends the halo parts of the local
// gradient back to their owners; finish_reverse() adds what comes back into this rank's slab gradient.
// Between start and finish the caller computes what needs no halo. Tensors are (N, C, *box), plain.
class HaloExchange {
 public:
  // `tag` must differ between exchanges that can be in flight at the same time (e.g. per layer).
  // Buffers live on `backend` (device memory on a GPU backend).
  HaloExchange(Backend& backend, Communicator& spatial, HaloPlan plan, int tag);

  const HaloPlan& plan() const { return plan_; }

  void start(const Tensor& owned);
  // Fills `local` (N, C, *plan.local), allocating it when undefined.
  void finish(const Tensor& owned, Tensor& local);
  // Convenience: start + finish, returning the local tensor.
  Tensor exchange(const Tensor& owned);

  void start_reverse(const Tensor& local_gradient);
  // Fills `owned_gradient` (N, C, *plan.owned; zero where this rank's layer did not read and no
  // neighbour sent), allocating it when undefined.
  void finish_reverse(const Tensor& local_gradient, Tensor& owned_gradient);
  Tensor reverse(const Tensor& local_gradient);

  // Lets messages in flight progress; true when none are left.
  bool test();

 private:
  Shape shape_of(const SpatialBox& box) const;
  void post(const std::vector<HaloPiece>& incoming, const std::vector<HaloPiece>& outgoing, const Tensor& source,
            const SpatialBox& source_box, int tag);
  void complete(const std::vector<HaloPiece>& incoming, const Tensor& source, const SpatialBox& source_box,
                Tensor& target, const SpatialBox& target_box, bool accumulate);

  Backend& backend_;
  Communicator& comm_;
  HaloPlan plan_;
  int tag_;
  std::int64_t batch_ = 0, channels_ = 0;  // of the tensors in flight
  std::unique_ptr<MessageBatch> messages_;
  std::vector<Tensor> send_buffers_, receive_buffers_;
};

}  // namespace fanstore::trainer
