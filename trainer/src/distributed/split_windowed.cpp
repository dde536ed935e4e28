// Split convolution, transposed convolution and pooling: the interior computed while the halo
// travels, the boundary pieces after it arrives, and in backward the halo gradients sent home
// while the weight gradients are computed.
#include <stdexcept>

#include "split_ops.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/pooling.hpp"

namespace fanstore::trainer {
namespace {

class SplitWindowed final : public SplitOp {
 public:
  SplitWindowed(SplitContext& ctx, Layer& layer, NodeId id, const Partition& in, const Partition& out,
                const Window& window, const SpatialBox& given)
      : ctx_(ctx),
        layer_(layer),
        conv_(dynamic_cast<Convolution*>(&layer)),
        pool_(dynamic_cast<Pooling*>(&layer)),
        halo_(ctx.backend, ctx.grid.spatial(), make_halo_plan(window, in, out, ctx.grid.coords()),
              static_cast<int>(id)),
        given_(given),
        out_slab_(out.owned(ctx.grid.coords())) {
    if (!conv_ && !pool_) throw std::logic_error(layer.name() + ": not a windowed layer");
    const HaloPlan& plan = halo_.plan();
    // A consumer of the model input gets the loaded box, which already holds its halo.
    preloaded_ = !(given_ == plan.owned) && given_.contains(plan.local);
    direct_ = !preloaded_ && !plan.exchanges() && plan.local == plan.owned;
    const std::int64_t slab_floats = plan.owned.volume() * input_channels();
    pieces_ =
        window_pieces(window, out_slab_, plan.owned, in.whole(),
                      overlaps_in_pieces(ctx.options.overlap && !ctx.options.one_kernel_layers.contains(layer.name()),
                                         plan.exchanges() && !preloaded_, slab_floats, weight_floats()));
    for (const auto& piece : pieces_) {
      if (conv_) conv_kernels_.push_back(ctx.backend.make_convolution(with_padding_of(piece, conv_->spec())));
      else pool_kernels_.push_back(ctx.backend.make_pooling(with_padding_of(piece, pool_->spec())));
    }
  }

  std::size_t kernels() const override { return pieces_.size(); }

  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override {
    in_channels_ = inputs.at(0).shape()[1];
    Tensor y = forward_pieces(inputs, mode);
    // Only a training convolution reads its pieces' inputs again (the weight gradient); pooling needs none.
    if (!conv_ || mode != Mode::Train) x_pieces_.assign(pieces_.size(), Tensor());
    return y;
  }

  // Without an input gradient (the model input's consumer) only the weight gradient is computed.
  bool backward_reads_weights() const override { return layer_.input_gradient(); }

  std::vector<Tensor> backward(Tensor dy_any) override {
    Backend& b = ctx_.backend;
    const HaloPlan& plan = halo_.plan();
    if (conv_ && !x_pieces_[0].defined())
      throw std::logic_error(layer_.name() + ": backward needs a forward in Mode::Train first");
    Tensor owned_grad;
    if (!layer_.input_gradient()) {  // on the model input in training: the weight gradient only, no reverse halo
      if (conv_) accumulate_weight_gradients(pieces_.size() == 1 ? std::vector<Tensor>{dy_any} : crop_pieces(dy_any));
      x_pieces_.assign(pieces_.size(), Tensor());
      return {Tensor()};
    }
    if (pieces_.size() == 1) {
      Tensor dx = run_backward_data(0, dy_any);
      if (direct_) {
        if (conv_) accumulate_weight_gradients({dy_any});
        x_pieces_.assign(1, Tensor());
        return {dx};
      }
      // The reverse halo travels while the weight gradient is computed.
      const Tensor local_grad = b.to_plain(dx);
      halo_.start_reverse(local_grad);
      if (conv_) accumulate_weight_gradients({dy_any});
      halo_.finish_reverse(local_grad, owned_grad);
      x_pieces_.assign(1, Tensor());
      return {owned_grad};
    }
    std::vector<Tensor> dy_pieces = crop_pieces(std::move(dy_any));
    Tensor local_grad = b.zeros(box_shape(dy_pieces[0].shape()[0], in_channels_, plan.local));
    // Boundary pieces first: the halo positions get gradient only from them, so the reverse halo can
    // leave before the interior's input gradient and every weight gradient are computed.
    for (std::size_t k = 1; k < pieces_.size(); ++k)
      copy_region(b, b.to_plain(run_backward_data(k, dy_pieces[k])), pieces_[k].in, local_grad, plan.local,
                  pieces_[k].in, true);
    halo_.start_reverse(local_grad);
    copy_region(b, b.to_plain(run_backward_data(0, dy_pieces[0])), pieces_[0].in, local_grad, plan.local, pieces_[0].in,
                true);
    if (conv_) accumulate_weight_gradients(dy_pieces);
    halo_.finish_reverse(local_grad, owned_grad);
    x_pieces_.assign(pieces_.size(), Tensor());
    return {owned_grad};
  }

 private:
  // The forward proper: the pieces' inputs are left in x_pieces_.
  Tensor forward_pieces(const std::vector<Tensor>& inputs, Mode mode) {
    Backend& b = ctx_.backend;
    const HaloPlan& plan = halo_.plan();
    const Tensor& x = inputs.at(0);
    x_pieces_.assign(pieces_.size(), Tensor());
    if (direct_) {  // no halo and the whole slab is read: the serial layer on the slab
      x_pieces_[0] = x;
      return run_forward(0, x, mode);
    }
    Tensor local;
    if (preloaded_) {
      local = crop(b, b.to_plain(x), given_, plan.local);
    } else if (!plan.exchanges()) {
      local = crop(b, b.to_plain(x), given_, plan.local);  // a floor-mode window leaves part of the slab unread
    } else {
      // A plain copy to pack the faces from and to assemble the local box; each full-size temporary is
      // dropped as soon as the pieces are cut from it (the peak memory of a rank is what a split saves).
      Tensor owned = crop(b, b.to_plain(x), given_, plan.owned);
      halo_.start(owned);
      Tensor interior;
      if (pieces_.size() > 1) {
        // The interior reads only this rank's slab: compute it while the halo travels (on the input
        // as it came, in the backend's layout, when it reads the whole slab).
        x_pieces_[0] = pieces_[0].in == given_ ? x : crop(b, owned, plan.owned, pieces_[0].in);
        interior = run_forward(0, x_pieces_[0], mode);
        halo_.test();
      }
      halo_.finish(owned, local);
      if (pieces_.size() > 1) {
        const Shape y_shape = box_shape(owned.shape()[0], out_channels(owned), out_slab_);
        owned = Tensor();
        for (std::size_t k = 1; k < pieces_.size(); ++k) x_pieces_[k] = crop(b, local, plan.local, pieces_[k].in);
        local = Tensor();
        Tensor y = b.zeros(y_shape);
        copy_region(b, b.to_plain(interior), pieces_[0].out, y, out_slab_, pieces_[0].out, false);
        interior = Tensor();
        for (std::size_t k = 1; k < pieces_.size(); ++k)
          copy_region(b, b.to_plain(run_forward(k, x_pieces_[k], mode)), pieces_[k].out, y, out_slab_, pieces_[k].out,
                      false);
        return y;
      }
    }
    x_pieces_[0] = local;  // one piece: it reads exactly the local box
    return run_forward(0, local, mode);
  }

  // Each piece's part of the output gradient (dy dropped once cut).
  std::vector<Tensor> crop_pieces(Tensor dy_any) {
    Backend& b = ctx_.backend;
    std::vector<Tensor> dy_pieces(pieces_.size());
    const Tensor dy = b.to_plain(dy_any);
    dy_any = Tensor();
    for (std::size_t k = 0; k < pieces_.size(); ++k) dy_pieces[k] = crop(b, dy, out_slab_, pieces_[k].out);
    return dy_pieces;
  }

  std::int64_t input_channels() const {
    return conv_ ? conv_->spec().in_channels : 1;  // pooling: any (it always splits)
  }
  std::int64_t weight_floats() const {
    if (!conv_) return 0;
    return ctx_.table.parameters().at(conv_->parameter_handles()[0].index).shape.numel();
  }
  std::int64_t out_channels(const Tensor& x) const { return conv_ ? conv_->spec().out_channels : x.shape()[1]; }

  Tensor run_forward(std::size_t k, const Tensor& x, Mode mode) {
    if (pool_) return pool_kernels_[k]->forward(x, mode);
    const auto& handles = conv_->parameter_handles();
    Tensor bias = handles.size() > 1 ? ctx_.table.value(handles[1]) : Tensor();
    return conv_kernels_[k]->forward(x, ctx_.table.value(handles[0]), handles.size() > 1 ? &bias : nullptr, mode);
  }

  Tensor run_backward_data(std::size_t k, const Tensor& dy) {
    if (pool_) return pool_kernels_[k]->backward(dy);
    return conv_kernels_[k]->backward_data(dy, ctx_.table.value(conv_->parameter_handles()[0]));
  }

  // Each piece's weight (and bias) gradient; their sum is the slab's.
  void accumulate_weight_gradients(const std::vector<Tensor>& dy_pieces) {
    Backend& b = ctx_.backend;
    const auto& handles = conv_->parameter_handles();
    // The input gradient is done: with sharded weights their gathered copy goes before the whole-size weight
    // gradient comes (the two would otherwise meet at the largest layer's backward).
    ctx_.table.drop_values(handles);
    const bool has_bias = handles.size() > 1;
    Tensor dw = ctx_.table.gradient(handles[0]);
    Tensor db = has_bias ? ctx_.table.gradient(handles[1]) : Tensor();
    conv_kernels_[0]->backward_weights(x_pieces_[0], dy_pieces[0], dw, has_bias ? &db : nullptr);
    if (pieces_.size() == 1) return;
    Tensor dw_piece = b.zeros(dw.shape()), db_piece = has_bias ? b.zeros(db.shape()) : Tensor();
    for (std::size_t k = 1; k < pieces_.size(); ++k) {
      conv_kernels_[k]->backward_weights(x_pieces_[k], dy_pieces[k], dw_piece, has_bias ? &db_piece : nullptr);
      b.axpby(1.f, dw_piece, 1.f, dw);
      if (has_bias) b.axpby(1.f, db_piece, 1.f, db);
      halo_.test();
    }
  }

  SplitContext& ctx_;
  Layer& layer_;
  Convolution* conv_;
  Pooling* pool_;
  HaloExchange halo_;
  SpatialBox given_, out_slab_;
  bool preloaded_ = false;           // the input already holds the halo (the model input, loaded with it)
  bool direct_ = false;              // no halo, whole slab read: the serial kernel on the slab
  std::vector<WindowPiece> pieces_;  // [0] = the interior when there are several
  std::vector<std::unique_ptr<ConvolutionKernel>> conv_kernels_;  // one per piece: each keeps its own
  std::vector<std::unique_ptr<PoolingKernel>> pool_kernels_;      // primitives and max-pool workspace
  std::vector<Tensor> x_pieces_;  // each piece's input, kept for a training convolution's backward
  std::int64_t in_channels_ = 0;  // the last forward's input channels
};

}  // namespace

std::unique_ptr<SplitOp> make_split_windowed(SplitContext& ctx, Layer& layer, NodeId id, const Partition& in,
                                             const Partition& out, const Window& window, const SpatialBox& given) {
  return std::make_unique<SplitWindowed>(ctx, layer, id, in, out, window, given);
}

}  // namespace fanstore::trainer
