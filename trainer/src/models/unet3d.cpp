// 3D U-Net builder following the MLPerf image_segmentation reference (module names included).
#include <algorithm>
#include <stdexcept>

#include "trainer/layers/activation.hpp"
#include "trainer/layers/convolution.hpp"
#include "trainer/layers/normalization.hpp"
#include "trainer/layers/structural.hpp"
#include "trainer/models.hpp"

namespace fanstore::trainer {
namespace {

// MLPerf conv_block_factory: Sequential(conv3d k3 p1 (no bias), InstanceNorm3d(affine), ReLU).
NodeId conv_block(Model& m, NodeId x, const std::string& p, std::int64_t cin, std::int64_t cout, std::int64_t stride) {
  x = m.add<Convolution>({x}, p + ".0", convolution_spec(3, cin, cout, 3, stride, 1, /*bias=*/false));
  x = m.add<InstanceNorm>({x}, p + ".1", cout);
  return m.add<Activation>({x}, p + ".2", relu());
}

}  // namespace

std::unique_ptr<Model> build_unet3d(std::shared_ptr<Backend> backend, const ModelOptions& o) {
  const std::int64_t size = o.input_size ? o.input_size : 128, classes = o.classes ? o.classes : 3;
  const std::int64_t in_channels = o.in_channels ? o.in_channels : 1, n = o.batch;
  const std::int64_t depth = o.input_depth ? o.input_depth : size;
  // Five stride-2 stages halve the size five times, and instance norm needs > 1 voxel at the bottom.
  if (size % 32 != 0 || depth % 32 != 0 || std::max(size, depth) < 64)
    throw std::invalid_argument("unet3d: input " + std::to_string(depth) + "x" + std::to_string(size) + "x" +
                                std::to_string(size) + " needs edges that are multiples of 32, one at least 64");
  const std::int64_t filters[5] = {32, 64, 128, 256, 320};
  auto m = std::make_unique<Model>("unet3d", std::move(backend), Shape{n, in_channels, depth, size, size});

  // Input block: two conv blocks at full resolution.
  NodeId x = conv_block(*m, m->input(), "input_block.conv1", in_channels, filters[0], 1);
  x = conv_block(*m, x, "input_block.conv2", filters[0], filters[0], 1);
  m->check_shape(x, Shape{n, filters[0], depth, size, size}, "input_block");
  std::vector<NodeId> skips{x};
  std::vector<std::int64_t> skip_channels{filters[0]};

  // Down blocks 32->64->128->256->320, then the bottleneck 320->320, each: strided conv block + conv block.
  std::int64_t d = depth, s = size, channels = filters[0];
  for (int i = 0; i < 5; ++i) {
    const bool bottom = i == 4;
    const std::int64_t out = bottom ? filters[4] : filters[i + 1];
    const std::string p = bottom ? "bottleneck" : "downsample." + std::to_string(i);
    x = conv_block(*m, x, p + ".conv1", channels, out, 2);
    x = conv_block(*m, x, p + ".conv2", out, out, 1);
    d /= 2;
    s /= 2;
    channels = out;
    m->check_shape(x, Shape{n, channels, d, s, s}, p);
    if (!bottom) {
      skips.push_back(x);
      skip_channels.push_back(channels);
    }
  }

  // Up blocks 320->320, 320->256, 256->128, 128->64, 64->32: transposed conv k2 s2 (with bias, no
  // norm/activation), concat with the skip of the same resolution, two conv blocks.
  for (int i = 0; i < 5; ++i) {
    const std::int64_t out = skip_channels[static_cast<std::size_t>(4 - i)];
    const std::string p = "upsample." + std::to_string(i);
    x = m->add<Convolution>({x}, p + ".upsample_conv.0", convolution_spec(3, channels, out, 2, 2, 0, true, 1, true));
    x = m->add<Concat>({x, skips[static_cast<std::size_t>(4 - i)]}, p + ".concat");
    x = conv_block(*m, x, p + ".conv1", 2 * out, out, 1);
    x = conv_block(*m, x, p + ".conv2", out, out, 1);
    d *= 2;
    s *= 2;
    channels = out;
    m->check_shape(x, Shape{n, channels, d, s, s}, p);
  }
  x = m->add<Convolution>({x}, "output.conv", convolution_spec(3, channels, classes, 1, 1, 0, true));
  m->check_shape(x, Shape{n, classes, depth, size, size}, "output");
  m->finalize(x, o.seed);
  return m;
}

}  // namespace fanstore::trainer
