// Losses with their gradients, hand-rolled on plain tensors with double accumulation.
#include "trainer/losses.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace fanstore::trainer {
namespace {

// Logits (N, K, *S) seen as N blocks of K channels x `inner` positions.
struct ClassLayout {
  std::int64_t batch, classes, inner;
  std::int64_t at(std::int64_t n, std::int64_t k, std::int64_t i) const { return (n * classes + k) * inner + i; }
};

ClassLayout class_layout(const Tensor& logits, const std::vector<std::int32_t>& labels) {
  if (!logits.is_plain()) throw std::invalid_argument("loss: logits must be plain (Backend::to_plain)");
  const Shape& s = logits.shape();
  if (s.rank() < 2) throw std::invalid_argument("loss: logits " + s.to_string() + " need (N, K, ...)");
  ClassLayout l{s[0], s[1], s.spatial_size()};
  if (static_cast<std::int64_t>(labels.size()) != l.batch * l.inner)
    throw std::invalid_argument("loss: " + std::to_string(labels.size()) + " labels for logits " + s.to_string());
  for (auto y : labels)
    if (y < 0 || y >= l.classes) throw std::invalid_argument("loss: label " + std::to_string(y) + " out of range");
  return l;
}

// Softmax over the class axis, in double for stability of the tests.
std::vector<double> softmax(const Tensor& logits, const ClassLayout& l) {
  std::vector<double> p(static_cast<std::size_t>(logits.numel()));
  for (std::int64_t n = 0; n < l.batch; ++n)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      double mx = -INFINITY, sum = 0;
      for (std::int64_t k = 0; k < l.classes; ++k) mx = std::max<double>(mx, logits[l.at(n, k, i)]);
      for (std::int64_t k = 0; k < l.classes; ++k)
        sum += p[static_cast<std::size_t>(l.at(n, k, i))] = std::exp(logits[l.at(n, k, i)] - mx);
      for (std::int64_t k = 0; k < l.classes; ++k) p[static_cast<std::size_t>(l.at(n, k, i))] /= sum;
    }
  return p;
}

}  // namespace

LossResult softmax_cross_entropy(const Tensor& logits, const std::vector<std::int32_t>& labels, float label_smoothing) {
  const ClassLayout l = class_layout(logits, labels);
  const auto p = softmax(logits, l);
  const double count = static_cast<double>(l.batch * l.inner), s = label_smoothing;
  LossResult r{0, Tensor::zeros(logits.shape())};
  for (std::int64_t n = 0; n < l.batch; ++n)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      const auto y = labels[static_cast<std::size_t>(n * l.inner + i)];
      for (std::int64_t k = 0; k < l.classes; ++k) {
        const auto at = l.at(n, k, i);
        const double q = (k == y ? 1.0 - s : 0.0) + s / static_cast<double>(l.classes);
        r.loss -= q * std::log(std::max(p[static_cast<std::size_t>(at)], 1e-300));
        r.gradient[at] = static_cast<float>((p[static_cast<std::size_t>(at)] - q) / count);
      }
    }
  r.loss /= count;
  return r;
}

LossResult mean_squared_error(const Tensor& prediction, const Tensor& target) {
  if (!prediction.is_plain() || !target.is_plain() || prediction.shape() != target.shape())
    throw std::invalid_argument("mse: prediction " + prediction.shape().to_string() + " and target " +
                                target.shape().to_string() + " must be plain and of one shape");
  LossResult r{0, Tensor::zeros(prediction.shape())};
  const double count = static_cast<double>(prediction.numel());
  for (std::int64_t i = 0; i < prediction.numel(); ++i) {
    const double d = static_cast<double>(prediction[i]) - target[i];
    r.loss += d * d;
    r.gradient[i] = static_cast<float>(2.0 * d / count);
  }
  r.loss /= count;
  return r;
}

std::vector<double> dice_sums(const Tensor& logits, const std::vector<std::int32_t>& labels) {
  const ClassLayout l = class_layout(logits, labels);
  const auto p = softmax(logits, l);
  std::vector<double> sums(static_cast<std::size_t>(l.batch * l.classes * 3), 0.0);
  for (std::int64_t n = 0; n < l.batch; ++n)
    for (std::int64_t k = 0; k < l.classes; ++k) {
      double* s = sums.data() + (n * l.classes + k) * 3;
      for (std::int64_t i = 0; i < l.inner; ++i) {
        const double t = labels[static_cast<std::size_t>(n * l.inner + i)] == k ? 1.0 : 0.0;
        const double pk = p[static_cast<std::size_t>(l.at(n, k, i))];
        s[0] += pk * t;
        s[1] += pk;
        s[2] += t;
      }
    }
  return sums;
}

LossResult dice_loss_from_sums(const Tensor& logits, const std::vector<std::int32_t>& labels,
                               const std::vector<double>& sums, bool include_background) {
  const ClassLayout l = class_layout(logits, labels);
  if (sums.size() != static_cast<std::size_t>(l.batch * l.classes * 3))
    throw std::invalid_argument("dice: " + std::to_string(sums.size()) + " sums for logits " +
                                logits.shape().to_string());
  const auto p = softmax(logits, l);
  const double smooth_nr = 1e-6, smooth_dr = 1e-6;
  const std::int64_t first = include_background ? 0 : 1;
  const double terms = static_cast<double>(l.batch * (l.classes - first));
  if (terms <= 0) throw std::invalid_argument("dice: needs at least one non-background class");
  LossResult r{0, Tensor::zeros(logits.shape())};
  std::vector<double> dp(p.size(), 0.0);  // dLoss/dprobability
  for (std::int64_t n = 0; n < l.batch; ++n)
    for (std::int64_t k = first; k < l.classes; ++k) {
      const double* s = sums.data() + (n * l.classes + k) * 3;
      const double num = 2 * s[0] + smooth_nr, den = s[1] + s[2] + smooth_dr;
      r.loss += (1.0 - num / den) / terms;
      for (std::int64_t i = 0; i < l.inner; ++i) {
        const double t = labels[static_cast<std::size_t>(n * l.inner + i)] == k ? 1.0 : 0.0;
        dp[static_cast<std::size_t>(l.at(n, k, i))] = -(2 * t * den - num) / (den * den) / terms;
      }
    }
  // Back through the softmax: dz_k = p_k (g_k - sum_j p_j g_j).
  for (std::int64_t n = 0; n < l.batch; ++n)
    for (std::int64_t i = 0; i < l.inner; ++i) {
      double dot = 0;
      for (std::int64_t k = 0; k < l.classes; ++k)
        dot += p[static_cast<std::size_t>(l.at(n, k, i))] * dp[static_cast<std::size_t>(l.at(n, k, i))];
      for (std::int64_t k = 0; k < l.classes; ++k) {
        const auto at = static_cast<std::size_t>(l.at(n, k, i));
        r.gradient[l.at(n, k, i)] = static_cast<float>(p[at] * (dp[at] - dot));
      }
    }
  return r;
}

LossResult dice_loss(const Tensor& logits, const std::vector<std::int32_t>& labels, bool include_background) {
  return dice_loss_from_sums(logits, labels, dice_sums(logits, labels), include_background);
}

LossResult dice_cross_entropy(const Tensor& logits, const std::vector<std::int32_t>& labels, bool include_background) {
  LossResult d = dice_loss(logits, labels, include_background);
  LossResult c = softmax_cross_entropy(logits, labels);
  LossResult r{(d.loss + c.loss) / 2, Tensor::zeros(logits.shape())};
  for (std::int64_t i = 0; i < logits.numel(); ++i) r.gradient[i] = 0.5f * (d.gradient[i] + c.gradient[i]);
  return r;
}

}  // namespace fanstore::trainer
