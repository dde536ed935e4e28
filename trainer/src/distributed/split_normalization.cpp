// Split batch norm and instance norm: per-slab sums from the backend, summed over the spatial group
// (batch norm with --sync-bn: over every rank), then normalised with the global statistics; backward
// sums reduced the same way. Scale and shift gradients come out whole on every rank of the group, so
// one rank contributes them.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "split_ops.hpp"
#include "trainer/layers/normalization.hpp"

namespace fanstore::trainer {
namespace {

// Sums fresh (G, 2) F64 statistics over the group, on their device; a rank whose part another
// replica also holds adds nothing.
Tensor reduced(SplitContext& ctx, Tensor sums, bool statistics, bool counts) {
  if (!counts) sums = ctx.backend.zeros_like(sums);
  if (statistics) ctx.statistics_sum(sums);
  else ctx.spatial_sum(sums);
  return sums;
}

class SplitNormalization final : public SplitOp {
 public:
  SplitNormalization(SplitContext& ctx, Layer& layer, const Partition& partition, bool batch_norm)
      : ctx_(ctx), layer_(layer), batch_norm_(batch_norm), counts_(ctx.counts(partition)) {
    spatial_volume_ = static_cast<double>(partition.whole().volume());
    if (batch_norm) {
      const auto& bn = dynamic_cast<const BatchNorm&>(layer);
      epsilon_ = bn.epsilon();
      momentum_ = bn.momentum();
      running_mean_ = ctx.table.find_buffer(layer.name() + ".running_mean");
      running_var_ = ctx.table.find_buffer(layer.name() + ".running_var");
    } else {
      epsilon_ = dynamic_cast<const InstanceNorm&>(layer).epsilon();
    }
    // Batch norm with --sync-bn reduces over every rank: world rank 0 alone then contributes the
    // scale/shift gradients; otherwise each sample group's spatial rank 0 does.
    sync_ = batch_norm && ctx.options.sync_bn;
    contributes_ = sync_ ? ctx.grid.world().rank() == 0 : ctx.spatial_root();
  }

  Tensor forward(const std::vector<Tensor>& inputs, Mode mode) override {
    // Batch norm in Eval normalises with the running statistics: nothing to reduce, and nothing kept (also
    // after a training forward whose backward never came: a step the loss guard rolled back).
    if (batch_norm_ && mode == Mode::Eval) {
      x_ = Tensor();
      return layer_.forward(inputs, mode);
    }
    Backend& b = ctx_.backend;
    const auto& handles = layer_.parameter_handles();
    Tensor x = b.to_plain(inputs.at(0));
    const NormGroups groups = batch_norm_ ? NormGroups::PerChannel : NormGroups::PerSampleChannel;
    sums_ = reduced(ctx_, b.norm_sums(x, groups), sync_, counts_);
    count_ = spatial_volume_ * (batch_norm_ ? static_cast<double>(x.shape()[0]) : 1.0) *
             (sync_ ? static_cast<double>(ctx_.grid.shape().samples) : 1.0);
    if (batch_norm_ && mode == Mode::Train) update_running_statistics();
    Tensor y =
        b.norm_apply(x, sums_, count_, ctx_.table.value(handles[0]), ctx_.table.value(handles[1]), epsilon_, groups);
    x_ = mode == Mode::Train ? std::move(x) : Tensor();  // inference keeps nothing
    return y;
  }

  std::vector<Tensor> backward(Tensor dy_any) override {
    Backend& b = ctx_.backend;
    const auto& handles = layer_.parameter_handles();
    if (!x_.defined()) throw std::logic_error(layer_.name() + ": backward needs a forward in Mode::Train first");
    const NormGroups groups = batch_norm_ ? NormGroups::PerChannel : NormGroups::PerSampleChannel;
    const Tensor dy = b.to_plain(dy_any);
    const Tensor backward_sums =
        reduced(ctx_, b.norm_backward_sums(dy, x_, sums_, count_, epsilon_, groups), sync_, counts_);
    Tensor dgamma = ctx_.table.gradient(handles[0]), dbeta = ctx_.table.gradient(handles[1]);
    Tensor dx = b.norm_backward_apply(dy, x_, sums_, backward_sums, count_, ctx_.table.value(handles[0]), epsilon_,
                                      groups, dgamma, dbeta);
    if (!contributes_) {
      b.fill(dgamma, 0.f);
      b.fill(dbeta, 0.f);
    }
    x_ = Tensor();
    return {dx};
  }

 private:
  // PyTorch: running = (1 - m) running + m batch, the variance unbiased by count / (count - 1).
  void update_running_statistics() {
    Backend& b = ctx_.backend;
    const Tensor sums = b.to_host(sums_);
    const auto* s = static_cast<const double*>(sums.raw());
    Tensor mean = ctx_.table.buffer(BufferHandle{static_cast<std::size_t>(running_mean_)});
    Tensor var = ctx_.table.buffer(BufferHandle{static_cast<std::size_t>(running_var_)});
    Tensor mean_host = b.to_host(mean).clone(), var_host = b.to_host(var).clone();
    const double unbias = count_ > 1 ? count_ / (count_ - 1) : 1.0;
    for (std::int64_t c = 0; c < mean_host.numel(); ++c) {
      const double m = s[2 * c] / count_;
      const double v = std::max(0.0, s[2 * c + 1] / count_ - m * m);
      mean_host[c] = static_cast<float>((1.0 - momentum_) * mean_host[c] + momentum_ * m);
      var_host[c] = static_cast<float>((1.0 - momentum_) * var_host[c] + momentum_ * v * unbias);
    }
    b.copy(mean_host, mean);
    b.copy(var_host, var);
  }

  SplitContext& ctx_;
  Layer& layer_;
  bool batch_norm_, counts_, sync_ = false, contributes_ = true;
  float epsilon_ = 1e-5f, momentum_ = 0.1f;
  std::ptrdiff_t running_mean_ = -1, running_var_ = -1;
  double spatial_volume_ = 1, count_ = 1;
  Tensor x_, sums_;
};

}  // namespace

std::unique_ptr<SplitOp> make_split_batch_norm(SplitContext& ctx, Layer& layer, const Partition& partition) {
  return std::make_unique<SplitNormalization>(ctx, layer, partition, true);
}

std::unique_ptr<SplitOp> make_split_instance_norm(SplitContext& ctx, Layer& layer, const Partition& partition) {
  return std::make_unique<SplitNormalization>(ctx, layer, partition, false);
}

}  // namespace fanstore::trainer
