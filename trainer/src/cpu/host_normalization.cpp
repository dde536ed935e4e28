// Host normalisation statistics (instance norm, and batch norm across a spatial split): per-plane
// sums in double, combined into groups in a fixed order so results do not depend on threads.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "host_ops.hpp"

namespace fanstore::trainer::cpu {
namespace {

// x (N, C, *S) as N*C planes of `size` elements.
struct Planes {
  std::int64_t batch, channels, size;
  std::int64_t count() const { return batch * channels; }
  std::int64_t groups(NormGroups g) const { return g == NormGroups::PerChannel ? channels : count(); }
  std::int64_t group_of(std::int64_t plane, NormGroups g) const {
    return g == NormGroups::PerChannel ? plane % channels : plane;
  }
};

Planes planes_of(const Tensor& x, const char* op) {
  if (!x.is_plain() || x.dtype() != DType::F32 || x.shape().rank() < 3)
    throw std::invalid_argument(std::string(op) + ": needs a plain F32 (N, C, *S) tensor, got " +
                                x.shape().to_string());
  const Shape& s = x.shape();
  return {s[0], s[1], s.spatial_size()};
}

void check_sums(const Tensor& sums, const Planes& p, NormGroups g, const char* op) {
  if (sums.dtype() != DType::F64 || sums.shape() != Shape{p.groups(g), 2})
    throw std::invalid_argument(std::string(op) + ": statistics must be F64 (" + std::to_string(p.groups(g)) +
                                ", 2), got " + sums.shape().to_string() + " " + dtype_name(sums.dtype()));
}

// Per-plane [a, b] sums from f(plane, i) -> (a_i, b_i), then added into groups in plane order.
template <class F>
Tensor group_sums(const Planes& p, NormGroups g, F&& terms) {
  std::vector<double> per_plane(static_cast<std::size_t>(2 * p.count()));
#pragma omp parallel for schedule(static)
  for (std::int64_t q = 0; q < p.count(); ++q) {
    double a = 0, b = 0;
    for (std::int64_t i = 0; i < p.size; ++i) {
      const auto [u, v] = terms(q, i);
      a += u;
      b += v;
    }
    per_plane[static_cast<std::size_t>(2 * q)] = a;
    per_plane[static_cast<std::size_t>(2 * q + 1)] = b;
  }
  Tensor out = Tensor::on_storage(Storage::host(static_cast<std::size_t>(2 * p.groups(g)) * sizeof(double)),
                                  Shape{p.groups(g), 2}, DType::F64);
  auto* o = static_cast<double*>(out.raw());
  for (std::int64_t q = 0; q < p.count(); ++q) {
    const std::int64_t k = p.group_of(q, g);
    o[2 * k] += per_plane[static_cast<std::size_t>(2 * q)];
    o[2 * k + 1] += per_plane[static_cast<std::size_t>(2 * q + 1)];
  }
  return out;
}

// Mean and 1/sqrt(biased variance + eps) of every group.
std::vector<double> moments(const Tensor& sums, double count, float epsilon) {
  const auto* s = static_cast<const double*>(sums.raw());
  const auto groups = static_cast<std::size_t>(sums.shape()[0]);
  std::vector<double> m(2 * groups);
  for (std::size_t k = 0; k < groups; ++k) {
    const double mean = s[2 * k] / count;
    const double var = std::max(0.0, s[2 * k + 1] / count - mean * mean);
    m[2 * k] = mean;
    m[2 * k + 1] = 1.0 / std::sqrt(var + epsilon);
  }
  return m;
}

}  // namespace

Tensor norm_sums(const Tensor& x, NormGroups groups) {
  const Planes p = planes_of(x, "norm_sums");
  const float* in = x.data();
  return group_sums(p, groups, [&](std::int64_t q, std::int64_t i) {
    const double v = in[q * p.size + i];
    return std::pair<double, double>(v, v * v);
  });
}

Tensor norm_apply(const Tensor& x, const Tensor& sums, double count, const Tensor& gamma, const Tensor& beta,
                  float epsilon, NormGroups groups) {
  const Planes p = planes_of(x, "norm_apply");
  check_sums(sums, p, groups, "norm_apply");
  const auto m = moments(sums, count, epsilon);
  Tensor y = Tensor::zeros(x.shape());
  const float* in = x.data();
  const float* g = gamma.data();
  const float* b = beta.data();
  float* out = y.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t q = 0; q < p.count(); ++q) {
    const auto k = static_cast<std::size_t>(p.group_of(q, groups));
    const std::int64_t c = q % p.channels;
    const double mean = m[2 * k], inv = m[2 * k + 1];
    for (std::int64_t i = 0; i < p.size; ++i) {
      const auto at = q * p.size + i;
      out[at] = static_cast<float>(g[c] * ((in[at] - mean) * inv) + b[c]);
    }
  }
  return y;
}

Tensor norm_backward_sums(const Tensor& dy, const Tensor& x, const Tensor& sums, double count, float epsilon,
                          NormGroups groups) {
  const Planes p = planes_of(x, "norm_backward_sums");
  check_sums(sums, p, groups, "norm_backward_sums");
  if (dy.shape() != x.shape()) throw std::invalid_argument("norm_backward_sums: dy and x differ in shape");
  const auto m = moments(sums, count, epsilon);
  const float* d = dy.data();
  const float* in = x.data();
  return group_sums(p, groups, [&](std::int64_t q, std::int64_t i) {
    const auto k = static_cast<std::size_t>(p.group_of(q, groups));
    const auto at = q * p.size + i;
    const double x_hat = (in[at] - m[2 * k]) * m[2 * k + 1];
    return std::pair<double, double>(d[at], d[at] * x_hat);
  });
}

Tensor norm_backward_apply(const Tensor& dy, const Tensor& x, const Tensor& sums, const Tensor& backward_sums,
                           double count, const Tensor& gamma, float epsilon, NormGroups groups, Tensor& dgamma,
                           Tensor& dbeta) {
  const Planes p = planes_of(x, "norm_backward_apply");
  check_sums(sums, p, groups, "norm_backward_apply");
  check_sums(backward_sums, p, groups, "norm_backward_apply");
  const auto m = moments(sums, count, epsilon);
  const auto* bs = static_cast<const double*>(backward_sums.raw());
  const float* d = dy.data();
  const float* in = x.data();
  const float* g = gamma.data();
  Tensor dx = Tensor::zeros(x.shape());
  float* out = dx.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t q = 0; q < p.count(); ++q) {
    const auto k = static_cast<std::size_t>(p.group_of(q, groups));
    const std::int64_t c = q % p.channels;
    const double mean = m[2 * k], inv = m[2 * k + 1];
    const double mean_dy = bs[2 * k] / count, mean_dy_xhat = bs[2 * k + 1] / count;
    const double scale = g[c] * inv;
    for (std::int64_t i = 0; i < p.size; ++i) {
      const auto at = q * p.size + i;
      const double x_hat = (in[at] - mean) * inv;
      out[at] = static_cast<float>(scale * (d[at] - mean_dy - x_hat * mean_dy_xhat));
    }
  }
  // dgamma[c] = sum over c's groups of sum(dy * x_hat); dbeta[c] = sum of sum(dy). In group order.
  std::vector<double> dg(static_cast<std::size_t>(p.channels), 0.0), db(static_cast<std::size_t>(p.channels), 0.0);
  for (std::int64_t k = 0; k < p.groups(groups); ++k) {
    const auto c = static_cast<std::size_t>(k % p.channels);
    db[c] += bs[2 * k];
    dg[c] += bs[2 * k + 1];
  }
  for (std::int64_t c = 0; c < p.channels; ++c) {
    dgamma.data()[c] = static_cast<float>(dg[static_cast<std::size_t>(c)]);
    dbeta.data()[c] = static_cast<float>(db[static_cast<std::size_t>(c)]);
  }
  return dx;
}

}  // namespace fanstore::trainer::cpu
