// Synthetic KiTS19-like cases: ellipsoid "kidneys" holding sphere/cube "tumors", distinct intensities + noise.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "fanstore/random.hpp"
#include "generators.hpp"
#include "hdf5_writer.hpp"
#include "output_plan.hpp"

namespace fanstore::datagen {
namespace {

constexpr int kDefaultSize = 64;  // the smallest edge fanstore-train's U-Net takes whole (multiples of 32, one >= 64)
constexpr std::uint8_t kBackground = 0, kKidney = 1, kTumor = 2;

struct Shape {
  double center[3];  // z, y, x in voxels
  double radius[3];
  bool cube;  // otherwise an ellipsoid

  bool contains(int z, int y, int x) const {
    const double d[3] = {(z - center[0]) / radius[0], (y - center[1]) / radius[1], (x - center[2]) / radius[2]};
    if (cube) return std::max({std::abs(d[0]), std::abs(d[1]), std::abs(d[2])}) <= 1.0;
    return d[0] * d[0] + d[1] * d[1] + d[2] * d[2] <= 1.0;
  }
};

// The labels are exactly the painted shapes; intensities overlap only through the noise, so the
// task is learnable but the boundaries still need spatial context.
void write_case(const std::string& path, int edge, RandomStream& rng) {
  std::vector<Shape> kidneys, tumors;
  const int kidney_count = rng.chance(0.5) ? 1 : 2;
  for (int k = 0; k < kidney_count; ++k) {
    Shape kidney{};
    for (int axis = 0; axis < 3; ++axis) {
      kidney.center[axis] = rng.uniform(0.3, 0.7) * edge;
      kidney.radius[axis] = rng.uniform(0.12, 0.24) * edge;
    }
    kidney.cube = false;
    kidneys.push_back(kidney);
    if (rng.chance(0.75)) {
      Shape tumor{};
      const double size = rng.uniform(0.3, 0.6) * std::min({kidney.radius[0], kidney.radius[1], kidney.radius[2]});
      for (int axis = 0; axis < 3; ++axis) {
        tumor.center[axis] = kidney.center[axis] + rng.uniform(-0.5, 0.5) * kidney.radius[axis];
        tumor.radius[axis] = std::max(1.0, size);
      }
      tumor.cube = rng.chance(0.3);
      tumors.push_back(tumor);
    }
  }
  const double kidney_intensity = rng.uniform(0.8, 1.2);
  const double tumor_intensity = rng.uniform(1.8, 2.2);
  const double noise = rng.uniform(0.2, 0.4);

  const std::size_t voxels = static_cast<std::size_t>(edge) * edge * edge;
  std::vector<float> image(voxels);
  std::vector<std::uint8_t> label(voxels, kBackground);
  std::size_t voxel = 0;
  for (int z = 0; z < edge; ++z) {
    for (int y = 0; y < edge; ++y) {
      for (int x = 0; x < edge; ++x, ++voxel) {
        double intensity = 0;
        for (const auto& kidney : kidneys) {
          if (kidney.contains(z, y, x)) label[voxel] = kKidney, intensity = kidney_intensity;
        }
        for (const auto& tumor : tumors) {  // painted last: a tumor wins over its kidney
          if (tumor.contains(z, y, x)) label[voxel] = kTumor, intensity = tumor_intensity;
        }
        image[voxel] = static_cast<float>(intensity + noise * rng.normal());
      }
    }
  }
  const auto side = static_cast<std::uint64_t>(edge);
  Hdf5Writer file(path);
  file.write_float32("image", {1, side, side, side}, image);
  file.write_uint8("label", {side, side, side}, label);
  file.close();
}

}  // namespace

std::string generate_unet3d(const GeneratorOptions& options) {
  const int edge = options.size > 0 ? options.size : kDefaultSize;
  const SplitCounts counts = generate_volume_splits(options, edge, "case", write_case);
  return "unet3d: " + std::to_string(counts.train) + " train + " + std::to_string(counts.val) + " val cases, " +
         std::to_string(edge) + "^3 in " + options.output_dir;
}

}  // namespace fanstore::datagen
