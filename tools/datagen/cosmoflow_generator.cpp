// Synthetic CosmoFlow universes: Poisson counts of a log-normal field whose statistics encode 4 targets.
#include <cmath>
#include <cstdio>
#include <vector>

#include "fanstore/random.hpp"
#include "generators.hpp"
#include "hdf5_writer.hpp"
#include "output_plan.hpp"
#include "periodic_smoothing.hpp"

namespace fanstore::datagen {
namespace {

constexpr int kDefaultSize = 32;
constexpr int kChannels = 4;  // MLPerf: 4 redshift snapshots
constexpr int kTargets = 4;   // MLPerf: 4 cosmological parameters scaled to about [-1, 1]

// Each target drives one statistic a 3D CNN can measure: t0 the clustering amplitude, t1 the
// correlation length, t2 the mean density, t3 how fast clustering grows across the channels.
void write_universe(const std::string& path, int edge, RandomStream& rng) {
  float targets[kTargets];
  for (auto& t : targets) t = static_cast<float>(rng.uniform(-1, 1));
  const double amplitude = 0.6 + 0.3 * targets[0];
  const double correlation_length = 1.5 + 0.75 * targets[1];
  const double mean_density = 4.0 * std::exp(0.5 * targets[2]);
  const double growth_per_channel = 0.25 + 0.15 * targets[3];

  const std::size_t voxels = static_cast<std::size_t>(edge) * edge * edge;
  std::vector<float> field(voxels);
  for (auto& v : field) v = static_cast<float>(rng.normal());
  smooth_periodic_cube(field, edge, correlation_length);
  double sum_squares = 0;
  for (float v : field) sum_squares += double(v) * v;
  const double field_scale = 1.0 / std::sqrt(sum_squares / voxels + 1e-12);  // unit variance: t0 alone sets it

  std::vector<float> counts(voxels * kChannels);  // channels-last, as MLPerf's `full`
  for (int channel = 0; channel < kChannels; ++channel) {
    const double sigma = amplitude * (1.0 + growth_per_channel * channel);
    for (std::size_t voxel = 0; voxel < voxels; ++voxel) {
      // Log-normal density with mean `mean_density`, then shot noise like counting particles.
      const double density = mean_density * std::exp(sigma * field_scale * field[voxel] - 0.5 * sigma * sigma);
      counts[voxel * kChannels + channel] = static_cast<float>(rng.poisson(density));
    }
  }
  const auto side = static_cast<std::uint64_t>(edge);
  Hdf5Writer file(path);
  file.write_float32("full", {side, side, side, kChannels}, counts);
  file.write_float32("unitPar", {kTargets}, std::vector<float>(targets, targets + kTargets));
  file.close();
}

}  // namespace

std::string generate_cosmoflow(const GeneratorOptions& options) {
  const int edge = options.size > 0 ? options.size : kDefaultSize;
  const SplitCounts counts = generate_volume_splits(options, edge, "univ", write_universe);
  return "cosmoflow: " + std::to_string(counts.train) + " train + " + std::to_string(counts.val) + " val universes, " +
         std::to_string(edge) + "^3 x 4 in " + options.output_dir;
}

}  // namespace fanstore::datagen
