// CosmoFlow builder following the MLPerf HPC reference (conv_size 32, kernel 3, 5 conv layers).
#include <stdexcept>

#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"
#include "trainer/models.hpp"

namespace fanstore::trainer {

std::unique_ptr<Model> build_cosmoflow(std::shared_ptr<Backend> backend, const ModelOptions& o) {
  const std::int64_t size = o.input_size ? o.input_size : 128, targets = o.classes ? o.classes : 4;
  const std::int64_t in_channels = o.in_channels ? o.in_channels : 4, n = o.batch;
  constexpr float kSlope = 0.3f;  // Keras LeakyReLU's default alpha, used by the reference
  if (size < 32)
    throw std::invalid_argument("cosmoflow: input size " + std::to_string(size) + " is below 32 (five 2x pools)");
  auto m = std::make_unique<Model>("cosmoflow", std::move(backend), Shape{n, in_channels, size, size, size});

  NodeId x = m->input();
  std::int64_t channels = in_channels, s = size;
  for (int i = 0; i < 5; ++i) {
    const std::int64_t filters = 32LL << i;
    const std::string p = "conv_blocks." + std::to_string(i);
    x = m->add<Convolution>({x}, p + ".conv", convolution_spec(3, channels, filters, 3, 1, 1, /*bias=*/true));
    x = m->add<Activation>({x}, p + ".act", leaky_relu(kSlope));
    x = m->add<Pooling>({x}, p + ".pool", pooling_spec(3, PoolingKind::Max, 2, 2));
    channels = filters;
    s /= 2;
    m->check_shape(x, Shape{n, channels, s, s, s}, p);
  }
  // Flattened in (C, D, H, W) order; the Keras reference flattens channels-last, which only permutes fc1's rows.
  x = m->add<Flatten>({x}, "flatten");
  std::int64_t features = channels * s * s * s;
  const std::int64_t hidden[2] = {128, 64};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "fc" + std::to_string(i + 1);
    x = m->add<Linear>({x}, p, features, hidden[i]);
    x = m->add<Activation>({x}, p + ".act", leaky_relu(kSlope));
    if (o.dropout > 0.f)
      x = m->add<Dropout>({x}, p + ".dropout", o.dropout, o.seed + static_cast<std::uint64_t>(i) + 1);
    features = hidden[i];
  }
  x = m->add<Linear>({x}, "fc3", features, targets);
  x = m->add<Activation>({x}, "output.tanh", tanh_activation());
  x = m->add<Activation>({x}, "output.scale", scale_by(1.2f));
  m->check_shape(x, Shape{n, targets}, "output");
  m->finalize(x, o.seed);
  return m;
}

}  // namespace fanstore::trainer
