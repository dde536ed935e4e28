// Where a split tensor becomes a replicated one: global average pooling (slab means weighted by the
// slab's share, summed over the spatial group) and the dense layer after Flatten (each rank multiplies
// its slab's features by its columns of the weight; the partial products are summed).
#include <stdexcept>
#include <utility>

#include "split_ops.hpp"
#include "trainer/layers/linear.hpp"

namespace fanstore::trainer {
namespace {

class SplitGlobalPooling final : public SplitOp {
 public:
  SplitGlobalPooling(SplitContext& ctx, Layer& layer, const Partition& partition)
      : ctx_(ctx),
        layer_(layer),
        share_(static_cast<float>(static_cast<double>(partition.owned(ctx.grid.coords()).volume()) /
                                  static_cast<double>(partition.whole().volume()))),
        counts_(ctx.counts(partition)) {}

  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override {
    // The layer's own pooling gives the slab mean; share x slab mean summed = global mean.
    Tensor y = ctx_.backend.clone(ctx_.backend.to_plain(layer_.forward(inputs, mode)));
    ctx_.backend.scale(y, counts_ ? share_ : 0.f);  // a part held by several ranks counts once
    ctx_.spatial_sum(y);
    return y;
  }

  std::vector<Tensor> backward(Tensor dy) override {
    // d(global mean)/dx = 1/V = share / v: the slab pooling's backward of share * dy.
    Tensor scaled = ctx_.backend.clone(ctx_.backend.to_plain(dy));
    ctx_.backend.scale(scaled, share_);
    return layer_.backward(std::move(scaled));
  }

 private:
  SplitContext& ctx_;
  Layer& layer_;
  float share_;
  bool counts_;
};

class SplitFlatLinear final : public SplitOp {
 public:
  SplitFlatLinear(SplitContext& ctx, Layer& layer, const Partition& partition, std::int64_t channels)
      : ctx_(ctx), layer_(layer) {
    const auto& handles = layer.parameter_handles();
    has_bias_ = handles.size() > 1;
    const Shape& w = ctx.table.parameters().at(handles[0].index).shape;  // (out, C * D * H * W)
    outputs_ = w[0];
    // The weight seen as (out, C, *spatial) and this rank's columns of it: (out, C, *slab).
    weight_shape_ = Shape{outputs_, channels};
    for (auto e : partition.extents) weight_shape_.dims.push_back(e);
    slab_ = partition.owned(ctx.grid.coords());
    whole_ = partition.whole();
    local_features_ = channels * slab_.volume();
    counts_ = ctx.counts(partition);
    // The bias is added once, by spatial rank 0, so that the sum of the partial products has it once.
    kernel_ = ctx.backend.make_inner_product(has_bias_ && ctx.spatial_root());
  }

  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override {
    Backend& b = ctx_.backend;
    const auto& handles = layer_.parameter_handles();
    Tensor x = b.to_plain(inputs.at(0));  // (N, C * slab)
    Tensor w_local = crop(b, ctx_.table.value(handles[0]).reshaped(weight_shape_), whole_, slab_)
                         .reshaped(Shape{outputs_, local_features_});
    Tensor bias = has_bias_ ? ctx_.table.value(handles[1]) : Tensor();
    Tensor y =
        b.clone(b.to_plain(kernel_->forward(x, w_local, has_bias_ && ctx_.spatial_root() ? &bias : nullptr, mode)));
    if (mode == Mode::Train) {  // inference keeps nothing
      x_ = std::move(x);
      w_local_ = std::move(w_local);
    } else {
      x_ = w_local_ = Tensor();
    }
    if (!counts_) b.fill(y, 0.f);  // another replica adds this part's product
    ctx_.spatial_sum(y);
    return y;
  }

  bool backward_reads_weights() const override { return false; }  // its columns, kept from forward

  std::vector<Tensor> backward(Tensor dy_any) override {
    Backend& b = ctx_.backend;
    const auto& handles = layer_.parameter_handles();
    if (!x_.defined()) throw std::logic_error(layer_.name() + ": backward needs a forward in Mode::Train first");
    const Tensor dy = b.to_plain(dy_any);
    Tensor dx = kernel_->backward_data(dy, w_local_);
    // This rank's columns of the weight gradient; the other ranks write theirs (the rest stays zero).
    Tensor dw = ctx_.table.gradient(handles[0]);
    Tensor dw_local = b.zeros(Shape{outputs_, local_features_});
    Tensor db = has_bias_ ? ctx_.table.gradient(handles[1]) : Tensor();
    const bool bias_here = has_bias_ && ctx_.spatial_root();
    kernel_->backward_weights(x_, dy, dw_local, bias_here ? &db : nullptr);
    if (has_bias_ && !bias_here) b.fill(db, 0.f);
    b.fill(dw, 0.f);
    Tensor dw_view = dw.reshaped(weight_shape_);
    copy_region(b, dw_local.reshaped(box_shape(outputs_, weight_shape_[1], slab_)), slab_, dw_view, whole_, slab_,
                false);
    x_ = w_local_ = Tensor();
    return {dx};
  }

 private:
  SplitContext& ctx_;
  Layer& layer_;
  bool has_bias_ = false, counts_ = true;
  std::int64_t outputs_ = 0, local_features_ = 0;
  Shape weight_shape_;
  SpatialBox slab_, whole_;
  std::unique_ptr<InnerProductKernel> kernel_;
  Tensor x_, w_local_;
};

}  // namespace

std::unique_ptr<SplitOp> make_split_global_pooling(SplitContext& ctx, Layer& layer, const Partition& partition) {
  return std::make_unique<SplitGlobalPooling>(ctx, layer, partition);
}

std::unique_ptr<SplitOp> make_split_flat_linear(SplitContext& ctx, Layer& layer, const Partition& partition,
                                                std::int64_t channels) {
  return std::make_unique<SplitFlatLinear>(ctx, layer, partition, channels);
}

}  // namespace fanstore::trainer
