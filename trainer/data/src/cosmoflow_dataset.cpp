// CosmoFlow samples: slab read of the (D,H,W,C) universe, transpose to (C,D,H,W), log(1+x), 4 targets.
#include "trainer/data/cosmoflow_dataset.hpp"

#include <cmath>

#include "trainer/data/data_error.hpp"

namespace fanstore::trainer::data {
namespace {

void check_volume_dims(const std::string& path, const std::string& name, const std::vector<std::uint64_t>& dims) {
  if (dims.size() != 4 || dims[0] == 0 || dims[3] == 0) {
    throw DataError(path, "dataset '" + name + "' has shape " + shape_to_string(dims) +
                              ", expected (D, H, W, channels) as in MLPerf CosmoFlow");
  }
}

}  // namespace

CosmoFlowDataset::CosmoFlowDataset(std::string directory, CosmoFlowOptions options)
    : options_(std::move(options)), files_(list_hdf5_files(directory)) {
  // Only the first file is probed: opening every file up front costs minutes at MLPerf scale;
  // the others are checked against it when they are read.
  Hdf5File first(files_.front());
  volume_dims_ = first.dims(options_.volume_dataset);
  check_volume_dims(first.path(), options_.volume_dataset, volume_dims_);
  const auto target_dims = first.dims(options_.target_dataset);
  if (target_dims.size() != 1 || target_dims[0] == 0) {
    throw DataError(first.path(), "dataset '" + options_.target_dataset + "' has shape " +
                                      shape_to_string(target_dims) + ", expected (targets,)");
  }
  target_count_ = target_dims[0];
  const auto depth = static_cast<std::int64_t>(volume_dims_[0]);
  const auto height = static_cast<std::int64_t>(volume_dims_[1]);
  const auto width = static_cast<std::int64_t>(volume_dims_[2]);
  slab_ = options_.slab.value_or(Slab::whole(depth, height, width));
  if (!slab_.fits_in(depth, height, width)) {
    throw DataError(first.path(),
                    "slab " + slab_.to_string() + " is outside the volume " + shape_to_string(volume_dims_));
  }
  layout_.input_shape = {static_cast<std::int64_t>(volume_dims_[3]), slab_.depth(), slab_.height(), slab_.width()};
  layout_.target_shape = {static_cast<std::int64_t>(target_count_)};
  layout_.target_kind = TargetKind::kRegression;
}

void CosmoFlowDataset::load_sample(std::size_t index, std::uint64_t /*augment_seed*/, const SampleBuffers& out) const {
  Hdf5File file(files_.at(index));
  const auto dims = file.dims(options_.volume_dataset);
  if (dims != volume_dims_) {
    throw DataError(file.path(), "dataset '" + options_.volume_dataset + "' has shape " + shape_to_string(dims) +
                                     ", expected " + shape_to_string(volume_dims_) + " like " + files_.front());
  }
  const auto target_dims = file.dims(options_.target_dataset);
  if (target_dims != std::vector<std::uint64_t>{target_count_}) {
    throw DataError(file.path(), "dataset '" + options_.target_dataset + "' has shape " + shape_to_string(target_dims) +
                                     ", expected (" + std::to_string(target_count_) + ",)");
  }
  const std::uint64_t channels = volume_dims_[3];
  const std::size_t voxels = static_cast<std::size_t>(slab_.depth() * slab_.height() * slab_.width());
  // Stored channels-last (as MLPerf); the slab is read as-is and transposed here, outside the HDF5 lock.
  std::vector<float> channels_last(voxels * channels);
  file.read_float(options_.volume_dataset,
                  {std::uint64_t(slab_.z0), std::uint64_t(slab_.y0), std::uint64_t(slab_.x0), 0},
                  {std::uint64_t(slab_.depth()), std::uint64_t(slab_.height()), std::uint64_t(slab_.width()), channels},
                  channels_last.data());
  file.read_float(options_.target_dataset, {0}, {target_count_}, out.target_values);
  for (std::uint64_t t = 0; t < target_count_; ++t)
    if (!std::isfinite(out.target_values[t]))
      throw DataError(file.path(), "dataset '" + options_.target_dataset + "' holds " +
                                       std::to_string(out.target_values[t]) + " at " + std::to_string(t) +
                                       ": a target must be finite");
  for (std::size_t voxel = 0; voxel < voxels; ++voxel) {
    for (std::uint64_t channel = 0; channel < channels; ++channel) {
      const float value = channels_last[voxel * channels + channel];
      const float x = options_.apply_log ? std::log1p(value) : value;
      // A NaN here would reach the loss and be rolled back step after step, naming no file.
      if (!std::isfinite(x)) {
        const auto plane = static_cast<std::size_t>(slab_.height() * slab_.width());
        const auto at = "(" + std::to_string(slab_.z0 + static_cast<std::int64_t>(voxel / plane)) + ", " +
                        std::to_string(slab_.y0 + static_cast<std::int64_t>(voxel % plane) / slab_.width()) + ", " +
                        std::to_string(slab_.x0 + static_cast<std::int64_t>(voxel) % slab_.width()) + ", " +
                        std::to_string(channel) + ")";
        throw DataError(file.path(), "dataset '" + options_.volume_dataset + "' holds " + std::to_string(value) +
                                         " at " + at +
                                         (std::isfinite(value) ? ", whose log(1 + x) is not finite (a count below -1)"
                                                               : ": the volume must be finite"));
      }
      out.input[channel * voxels + voxel] = x;
    }
  }
}

}  // namespace fanstore::trainer::data
