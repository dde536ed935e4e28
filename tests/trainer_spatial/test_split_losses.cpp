// The split form of the Dice loss: per-slab sums added up give the whole volume's loss, and each slab's
// gradient is the whole gradient's slab (the backend op against the host reference).
#include <gtest/gtest.h>

#include <cmath>

#include "trainer/backend.hpp"
#include "trainer/losses.hpp"

namespace fanstore::trainer {
namespace {

TEST(SplitLosses, DiceFromSlabSumsEqualsTheWholeVolume) {
  auto backend = make_cpu_backend({1});
  const std::int64_t n = 2, k = 3, d = 5, h = 4, w = 3, v = d * h * w;
  Tensor logits = Tensor::zeros(Shape{n, k, d, h, w});
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n * v));
  for (std::int64_t i = 0; i < logits.numel(); ++i)
    logits[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>((i * 7 + i / 5) % 3);
  const LossResult whole = backend->dice_loss(logits, labels, false);

  // Split D into [0, 2) and [2, 5): each slab's logits and labels.
  const std::int64_t cut = 2;
  std::vector<Tensor> parts;
  std::vector<std::vector<std::int32_t>> part_labels;
  for (auto [lo, hi] : {std::pair<std::int64_t, std::int64_t>{0, cut}, {cut, d}}) {
    Tensor t = Tensor::zeros(Shape{n, k, hi - lo, h, w});
    std::vector<std::int32_t> l;
    const std::int64_t slab = (hi - lo) * h * w;
    for (std::int64_t s = 0; s < n; ++s) {
      for (std::int64_t c = 0; c < k; ++c)
        for (std::int64_t i = 0; i < slab; ++i) t[(s * k + c) * slab + i] = logits[(s * k + c) * v + lo * h * w + i];
      for (std::int64_t i = 0; i < slab; ++i) l.push_back(labels[static_cast<std::size_t>(s * v + lo * h * w + i)]);
    }
    parts.push_back(t);
    part_labels.push_back(l);
  }
  // What the spatial group's allreduce does: add the slabs' sums.
  Tensor total = backend->to_host(backend->dice_sums(parts[0], part_labels[0])).clone();
  const Tensor second = backend->to_host(backend->dice_sums(parts[1], part_labels[1]));
  auto* t = static_cast<double*>(total.raw());
  for (std::int64_t i = 0; i < total.numel(); ++i) t[i] += static_cast<const double*>(second.raw())[i];
  const Tensor whole_grad = backend->to_host(whole.gradient);
  for (int part = 0; part < 2; ++part) {
    const LossResult r = backend->dice_loss_from_sums(parts[static_cast<std::size_t>(part)],
                                                      part_labels[static_cast<std::size_t>(part)], total, false);
    EXPECT_NEAR(r.loss, whole.loss, 1e-12);
    const Tensor g = backend->to_host(r.gradient);
    const std::int64_t lo = part == 0 ? 0 : cut, slab = (part == 0 ? cut : d - cut) * h * w;
    double worst = 0;
    for (std::int64_t s = 0; s < n; ++s)
      for (std::int64_t c = 0; c < k; ++c)
        for (std::int64_t i = 0; i < slab; ++i)
          worst = std::max(worst, static_cast<double>(std::fabs(g[(s * k + c) * slab + i] -
                                                                whole_grad[(s * k + c) * v + lo * h * w + i])));
    EXPECT_LT(worst, 1e-7) << "slab " << part;
  }
}

}  // namespace
}  // namespace fanstore::trainer
