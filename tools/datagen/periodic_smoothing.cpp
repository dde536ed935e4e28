// Three 1-D Gaussian passes (x, y, z) with wrap-around indexing.
#include "periodic_smoothing.hpp"

#include <cmath>

namespace fanstore::datagen {

void smooth_periodic_cube(std::vector<float>& cube, int edge, double sigma) {
  const int radius = static_cast<int>(std::ceil(3 * sigma));
  std::vector<double> weights(2 * radius + 1);
  double total = 0;
  for (int k = -radius; k <= radius; ++k) total += weights[k + radius] = std::exp(-0.5 * k * k / (sigma * sigma));
  for (auto& w : weights) w /= total;

  const std::size_t strides[3] = {1, static_cast<std::size_t>(edge), static_cast<std::size_t>(edge) * edge};
  std::vector<float> line(edge);
  for (const std::size_t stride : strides) {
    // For each line along this axis: its start is any voxel whose coordinate on the axis is 0.
    for (std::size_t start = 0; start < cube.size(); ++start) {
      if ((start / stride) % edge != 0) continue;
      for (int i = 0; i < edge; ++i) {
        double sum = 0;
        for (int k = -radius; k <= radius; ++k) {
          const int j = ((i + k) % edge + edge) % edge;
          sum += weights[k + radius] * cube[start + j * stride];
        }
        line[i] = static_cast<float>(sum);
      }
      for (int i = 0; i < edge; ++i) cube[start + i * stride] = line[i];
    }
  }
}

}  // namespace fanstore::datagen
