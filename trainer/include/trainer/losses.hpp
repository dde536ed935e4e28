// Losses: softmax cross-entropy (label smoothing), MSE, Dice and Dice + cross-entropy (MLPerf U-Net).
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/tensor.hpp"

namespace fanstore::trainer {

// The loss value (accumulated in double) and its gradient w.r.t. the prediction (plain, same shape).
struct LossResult {
  double loss = 0;
  Tensor gradient;
};

// logits: (N, K) or (N, K, *S), plain; labels: N (or N * prod(S)) class indices in [0, K).
// Mean over samples/voxels, as torch.nn.CrossEntropyLoss(label_smoothing=s): the target
// distribution is (1 - s) * one_hot + s / K.
LossResult softmax_cross_entropy(const Tensor& logits, const std::vector<std::int32_t>& labels,
                                 float label_smoothing = 0.f);

// mean((prediction - target)^2) over all elements (torch.nn.MSELoss()).
LossResult mean_squared_error(const Tensor& prediction, const Tensor& target);

// MLPerf U-Net Dice loss on logits (N, K, *S): softmax over K, one-hot labels, per (sample, class)
// dice = (2 sum(p t) + 1e-6) / (sum(p) + sum(t) + 1e-6), loss = mean(1 - dice) over samples and
// classes (class 0, the background, left out unless include_background).
LossResult dice_loss(const Tensor& logits, const std::vector<std::int32_t>& labels, bool include_background = false);

// Dice over a spatially split volume: per (sample, class) [sum p*t, sum p, sum t] over these logits'
// voxels (N*K*3 values, sample-major). Summed over the slabs of a volume they are the volume's sums,
// from which dice_loss_from_sums gives the whole volume's loss and the gradient of these (the slab's)
// logits. dice_loss(x) = dice_loss_from_sums(x, dice_sums(x)).
std::vector<double> dice_sums(const Tensor& logits, const std::vector<std::int32_t>& labels);
LossResult dice_loss_from_sums(const Tensor& logits, const std::vector<std::int32_t>& labels,
                               const std::vector<double>& sums, bool include_background = false);

// MLPerf's DiceCELoss: (dice_loss + softmax_cross_entropy) / 2.
LossResult dice_cross_entropy(const Tensor& logits, const std::vector<std::int32_t>& labels,
                              bool include_background = false);

}  // namespace fanstore::trainer
