// Naive-loop reference implementations: obviously correct, slow, double accumulation.
#include "reference_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fanstore::trainer::reference {
namespace {

// A plain (N, C, D, H, W) view of a rank-4 or rank-5 tensor (D = 1 for rank 4).
struct Volume {
  std::int64_t n, c, d, h, w;
  explicit Volume(const Shape& s)
      : n(s[0]), c(s[1]), d(s.rank() == 5 ? s[2] : 1), h(s[s.rank() - 2]), w(s[s.rank() - 1]) {}
  std::int64_t at(std::int64_t in, std::int64_t ic, std::int64_t id, std::int64_t ih, std::int64_t iw) const {
    return (((in * c + ic) * d + id) * h + ih) * w + iw;
  }
};

// Per-dimension window parameters padded to 3 dims (depth first) for 2D specs.
std::vector<std::int64_t> as3(const std::vector<std::int64_t>& v, std::int64_t fill) {
  if (v.size() == 3) return v;
  return {fill, v[0], v[1]};
}

}  // namespace

Tensor convolution(const Tensor& x, const Tensor& w, const Tensor* b, const ConvolutionSpec& spec) {
  const Volume in(x.shape());
  // p is the low-side padding: output o reads input o*s - p + k*d; the high side only bounds the size.
  const auto k = as3(spec.kernel, 1), s = as3(spec.stride, 1), p = as3(spec.padding_lo, 0), dl = as3(spec.dilation, 1);
  const std::int64_t cout = spec.out_channels;
  Shape out_shape = x.shape();
  out_shape[1] = cout;
  for (std::size_t i = 0; i < spec.kernel.size(); ++i) {
    const auto kk = spec.dilation[i] * (spec.kernel[i] - 1) + 1;
    const auto n = x.shape()[static_cast<int>(i) + 2];
    const auto pads = spec.padding_lo[i] + spec.padding_hi[i];
    out_shape[static_cast<int>(i) + 2] =
        spec.transposed ? (n - 1) * spec.stride[i] - pads + kk : (n + pads - kk) / spec.stride[i] + 1;
  }
  const Volume out(out_shape);
  std::vector<double> acc(static_cast<std::size_t>(out_shape.numel()), 0.0);
  // Weight index: direct (Cout, Cin, kd, kh, kw); transposed (Cin, Cout, kd, kh, kw).
  auto widx = [&](std::int64_t co, std::int64_t ci, std::int64_t a, std::int64_t bb, std::int64_t c) {
    const std::int64_t first = spec.transposed ? ci : co, second = spec.transposed ? co : ci;
    const std::int64_t c2 = spec.transposed ? cout : in.c;
    return (((first * c2 + second) * k[0] + a) * k[1] + bb) * k[2] + c;
  };
  for (std::int64_t n = 0; n < in.n; ++n)
    for (std::int64_t co = 0; co < cout; ++co)
      for (std::int64_t ci = 0; ci < in.c; ++ci)
        for (std::int64_t a = 0; a < k[0]; ++a)
          for (std::int64_t bb = 0; bb < k[1]; ++bb)
            for (std::int64_t c = 0; c < k[2]; ++c) {
              const double wv = w[widx(co, ci, a, bb, c)];
              if (!spec.transposed) {
                // y[o] += x[o*s - p + k*d] * w
                for (std::int64_t od = 0; od < out.d; ++od)
                  for (std::int64_t oh = 0; oh < out.h; ++oh)
                    for (std::int64_t ow = 0; ow < out.w; ++ow) {
                      const std::int64_t id = od * s[0] - p[0] + a * dl[0], ih = oh * s[1] - p[1] + bb * dl[1],
                                         iw = ow * s[2] - p[2] + c * dl[2];
                      if (id < 0 || ih < 0 || iw < 0 || id >= in.d || ih >= in.h || iw >= in.w) continue;
                      acc[static_cast<std::size_t>(out.at(n, co, od, oh, ow))] += wv * x[in.at(n, ci, id, ih, iw)];
                    }
              } else {
                // y[i*s - p + k*d] += x[i] * w (PyTorch ConvTranspose)
                for (std::int64_t id = 0; id < in.d; ++id)
                  for (std::int64_t ih = 0; ih < in.h; ++ih)
                    for (std::int64_t iw = 0; iw < in.w; ++iw) {
                      const std::int64_t od = id * s[0] - p[0] + a * dl[0], oh = ih * s[1] - p[1] + bb * dl[1],
                                         ow = iw * s[2] - p[2] + c * dl[2];
                      if (od < 0 || oh < 0 || ow < 0 || od >= out.d || oh >= out.h || ow >= out.w) continue;
                      acc[static_cast<std::size_t>(out.at(n, co, od, oh, ow))] += wv * x[in.at(n, ci, id, ih, iw)];
                    }
              }
            }
  Tensor y = Tensor::zeros(out_shape);
  const std::int64_t inner = out.d * out.h * out.w;
  for (std::int64_t i = 0; i < y.numel(); ++i)
    y[i] = static_cast<float>(acc[static_cast<std::size_t>(i)] + (b ? (*b)[(i / inner) % cout] : 0.f));
  return y;
}

Tensor pooling(const Tensor& x, const PoolingSpec& spec) {
  const Volume in(x.shape());
  const auto k = as3(spec.kernel, 1), s = as3(spec.stride, 1), p = as3(spec.padding_lo, 0);
  Shape out_shape = x.shape();
  for (std::size_t i = 0; i < spec.kernel.size(); ++i)
    out_shape[static_cast<int>(i) + 2] =
        (x.shape()[static_cast<int>(i) + 2] + spec.padding_lo[i] + spec.padding_hi[i] - spec.kernel[i]) /
            spec.stride[i] +
        1;
  const Volume out(out_shape);
  Tensor y = Tensor::zeros(out_shape);
  for (std::int64_t n = 0; n < in.n; ++n)
    for (std::int64_t c = 0; c < in.c; ++c)
      for (std::int64_t od = 0; od < out.d; ++od)
        for (std::int64_t oh = 0; oh < out.h; ++oh)
          for (std::int64_t ow = 0; ow < out.w; ++ow) {
            double best = -std::numeric_limits<double>::infinity(), sum = 0;
            for (std::int64_t a = 0; a < k[0]; ++a)
              for (std::int64_t bb = 0; bb < k[1]; ++bb)
                for (std::int64_t cc = 0; cc < k[2]; ++cc) {
                  const std::int64_t id = od * s[0] - p[0] + a, ih = oh * s[1] - p[1] + bb, iw = ow * s[2] - p[2] + cc;
                  if (id < 0 || ih < 0 || iw < 0 || id >= in.d || ih >= in.h || iw >= in.w) continue;  // pad: -inf / 0
                  const double v = x[in.at(n, c, id, ih, iw)];
                  best = std::max(best, v);
                  sum += v;
                }
            // Average counts the padding (count_include_pad=True), i.e. always divides by the window.
            y[out.at(n, c, od, oh, ow)] = static_cast<float>(
                spec.kind == PoolingKind::Max ? best : sum / static_cast<double>(k[0] * k[1] * k[2]));
          }
  return y;
}

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor* mean, const Tensor* variance,
                  double epsilon) {
  const Shape& sh = x.shape();
  const std::int64_t n = sh[0], c = sh[1], inner = sh.numel() / (n * c);
  Tensor y = Tensor::zeros(sh);
  for (std::int64_t ch = 0; ch < c; ++ch) {
    double m = 0, v = 0;
    if (mean) {
      m = (*mean)[ch];
      v = (*variance)[ch];
    } else {
      for (std::int64_t b = 0; b < n; ++b)
        for (std::int64_t i = 0; i < inner; ++i) m += x[(b * c + ch) * inner + i];
      m /= static_cast<double>(n * inner);
      for (std::int64_t b = 0; b < n; ++b)
        for (std::int64_t i = 0; i < inner; ++i) v += std::pow(x[(b * c + ch) * inner + i] - m, 2);
      v /= static_cast<double>(n * inner);
    }
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t i = 0; i < inner; ++i) {
        const auto at = (b * c + ch) * inner + i;
        y[at] = static_cast<float>(gamma[ch] * (x[at] - m) / std::sqrt(v + epsilon) + beta[ch]);
      }
  }
  return y;
}

Tensor instance_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon) {
  const Shape& sh = x.shape();
  const std::int64_t c = sh[1], inner = sh.spatial_size();
  Tensor y = Tensor::zeros(sh);
  for (std::int64_t plane = 0; plane < sh[0] * c; ++plane) {
    double m = 0, v = 0;
    for (std::int64_t i = 0; i < inner; ++i) m += x[plane * inner + i];
    m /= static_cast<double>(inner);
    for (std::int64_t i = 0; i < inner; ++i) v += std::pow(x[plane * inner + i] - m, 2);
    v /= static_cast<double>(inner);
    for (std::int64_t i = 0; i < inner; ++i)
      y[plane * inner + i] =
          static_cast<float>(gamma[plane % c] * (x[plane * inner + i] - m) / std::sqrt(v + epsilon) + beta[plane % c]);
  }
  return y;
}

Tensor eltwise(const Tensor& x, const EltwiseSpec& spec) {
  Tensor y = Tensor::zeros(x.shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double v = x[i];
    double r = v;
    switch (spec.kind) {
      case EltwiseKind::ReLU: r = v > 0 ? v : 0; break;
      case EltwiseKind::LeakyReLU: r = v > 0 ? v : spec.alpha * v; break;
      case EltwiseKind::Tanh: r = std::tanh(v); break;
      case EltwiseKind::Scale: r = spec.alpha * v; break;
    }
    y[i] = static_cast<float>(r);
  }
  return y;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* b) {
  const std::int64_t n = x.shape()[0], in = x.shape()[1], out = w.shape()[0];
  Tensor y = Tensor::zeros(Shape{n, out});
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = b ? (*b)[o] : 0.0;
      for (std::int64_t i = 0; i < in; ++i) acc += static_cast<double>(x[r * in + i]) * w[o * in + i];
      y[r * out + o] = static_cast<float>(acc);
    }
  return y;
}

Tensor global_average(const Tensor& x) {
  Shape out = x.shape();
  for (int i = 2; i < out.rank(); ++i) out[i] = 1;
  const std::int64_t inner = x.shape().spatial_size();
  Tensor y = Tensor::zeros(out);
  for (std::int64_t plane = 0; plane < out[0] * out[1]; ++plane) {
    double sum = 0;
    for (std::int64_t i = 0; i < inner; ++i) sum += x[plane * inner + i];
    y[plane] = static_cast<float>(sum / static_cast<double>(inner));
  }
  return y;
}

Tensor concat_channels(const std::vector<Tensor>& xs) {
  Shape out = xs[0].shape();
  out[1] = 0;
  for (const auto& t : xs) out[1] += t.shape()[1];
  Tensor y = Tensor::zeros(out);
  const std::int64_t inner = out.spatial_size();
  for (std::int64_t n = 0; n < out[0]; ++n) {
    std::int64_t base = 0;
    for (const auto& t : xs)
      for (std::int64_t c = 0; c < t.shape()[1]; ++c, ++base)
        for (std::int64_t i = 0; i < inner; ++i)
          y[(n * out[1] + base) * inner + i] = t[(n * t.shape()[1] + c) * inner + i];
  }
  return y;
}

}  // namespace fanstore::trainer::reference
