// ResNet-50 builder, layer for layer torchvision's resnet50 (v1.5) with its state_dict names.
#include <stdexcept>

#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/linear.hpp"
#include "trainer/layers/normalization.hpp"
#include "trainer/layers/pooling.hpp"
#include "trainer/layers/structural.hpp"
#include "trainer/models.hpp"

namespace fanstore::trainer {
namespace {

constexpr std::int64_t kExpansion = 4;

std::int64_t conv_out(std::int64_t n, std::int64_t k, std::int64_t s, std::int64_t p) {
  return (n + 2 * p - k) / s + 1;
}

NodeId conv_bn(Model& m, NodeId x, const std::string& conv, const std::string& bn, std::int64_t cin, std::int64_t cout,
               std::int64_t k, std::int64_t stride, std::int64_t pad, float bn_scale = 1.f) {
  x = m.add<Convolution>({x}, conv, convolution_spec(2, cin, cout, k, stride, pad, /*bias=*/false));
  return m.add<BatchNorm>({x}, bn, cout, 1e-5f, 0.1f, bn_scale);
}

// torchvision Bottleneck: 1x1 (planes) -> 3x3 stride s (planes) -> 1x1 (4 planes), BN after each,
// shortcut = x or downsample (1x1 stride s conv + BN), then ReLU(main + shortcut).
NodeId bottleneck(Model& m, NodeId x, const std::string& p, std::int64_t cin, std::int64_t planes, std::int64_t stride,
                  bool zero_init_residual) {
  const std::int64_t cout = planes * kExpansion;
  NodeId y = conv_bn(m, x, p + ".conv1", p + ".bn1", cin, planes, 1, 1, 0);
  y = m.add<Activation>({y}, p + ".relu1", relu());
  y = conv_bn(m, y, p + ".conv2", p + ".bn2", planes, planes, 3, stride, 1);
  y = m.add<Activation>({y}, p + ".relu2", relu());
  // zero_init_residual: the block starts as its shortcut, so the deep network starts shallow and a
  // large learning rate does not blow it up in the first steps.
  y = conv_bn(m, y, p + ".conv3", p + ".bn3", planes, cout, 1, 1, 0, zero_init_residual ? 0.f : 1.f);
  NodeId shortcut = x;
  if (stride != 1 || cin != cout)
    shortcut = conv_bn(m, x, p + ".downsample.0", p + ".downsample.1", cin, cout, 1, stride, 0);
  y = m.add<Add>({y, shortcut}, p + ".add");
  return m.add<Activation>({y}, p + ".relu3", relu());
}

}  // namespace

std::unique_ptr<Model> build_resnet50(std::shared_ptr<Backend> backend, const ModelOptions& o) {
  const std::int64_t size = o.input_size ? o.input_size : 224, classes = o.classes ? o.classes : 1000;
  const std::int64_t in_channels = o.in_channels ? o.in_channels : 3, n = o.batch;
  if (size < 32)
    throw std::invalid_argument("resnet50: input size " + std::to_string(size) + " is below 32 (five stride-2 stages)");
  auto m = std::make_unique<Model>("resnet50", std::move(backend), Shape{n, in_channels, size, size});

  // Stem: conv 7x7/2 -> BN -> ReLU -> maxpool 3x3/2.
  NodeId x = conv_bn(*m, m->input(), "conv1", "bn1", in_channels, 64, 7, 2, 3);
  x = m->add<Activation>({x}, "relu", relu());
  x = m->add<Pooling>({x}, "maxpool", pooling_spec(2, PoolingKind::Max, 3, 2, 1));
  std::int64_t s = conv_out(conv_out(size, 7, 2, 3), 3, 2, 1);
  m->check_shape(x, Shape{n, 64, s, s}, "stem");

  const std::int64_t blocks[4] = {3, 4, 6, 3}, planes[4] = {64, 128, 256, 512};
  std::int64_t channels = 64;
  for (int stage = 0; stage < 4; ++stage) {
    for (std::int64_t b = 0; b < blocks[stage]; ++b) {
      const std::int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      const std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      x = bottleneck(*m, x, name, channels, planes[stage], stride, o.zero_init_residual);
      channels = planes[stage] * kExpansion;
      s = conv_out(s, 3, stride, 1);
      m->check_shape(x, Shape{n, channels, s, s}, name);
    }
  }
  x = m->add<GlobalAveragePooling>({x}, "avgpool");
  x = m->add<Flatten>({x}, "flatten");
  x = m->add<Linear>({x}, "fc", channels, classes);
  m->check_shape(x, Shape{n, classes}, "fc");
  m->finalize(x, o.seed);
  return m;
}

}  // namespace fanstore::trainer
