// 3D U-Net samples: a spatial slab of `image` (C,D,H,W) and one of `label` (D,H,W) from one HDF5 case.
#include "trainer/data/unet3d_dataset.hpp"

#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "trainer/data/data_error.hpp"

namespace fanstore::trainer::data {
namespace {

std::vector<std::uint64_t> spatial_dims_of_image(const std::vector<std::uint64_t>& image_dims) {
  return {image_dims[1], image_dims[2], image_dims[3]};
}

}  // namespace

Unet3dDataset::Unet3dDataset(std::string directory, Unet3dOptions options)
    : options_(std::move(options)), files_(list_hdf5_files(directory)) {
  Hdf5File first(files_.front());
  image_dims_ = first.dims(options_.image_dataset);
  if (image_dims_.size() != 4 || image_dims_[0] == 0) {
    throw DataError(first.path(), "dataset '" + options_.image_dataset + "' has shape " + shape_to_string(image_dims_) +
                                      ", expected (channels, D, H, W)");
  }
  const auto label_dims = first.dims(options_.label_dataset);
  if (label_dims != spatial_dims_of_image(image_dims_)) {
    throw DataError(first.path(), "dataset '" + options_.label_dataset + "' has shape " + shape_to_string(label_dims) +
                                      ", expected " + shape_to_string(spatial_dims_of_image(image_dims_)));
  }
  const auto depth = static_cast<std::int64_t>(image_dims_[1]);
  const auto height = static_cast<std::int64_t>(image_dims_[2]);
  const auto width = static_cast<std::int64_t>(image_dims_[3]);
  slab_ = options_.slab.value_or(Slab::whole(depth, height, width));
  if (!slab_.fits_in(depth, height, width)) {
    throw DataError(first.path(),
                    "slab " + slab_.to_string() + " is outside the volume " + shape_to_string(image_dims_));
  }
  label_slab_ = options_.label_slab.value_or(slab_);
  if (!label_slab_.fits_in(depth, height, width)) {
    throw DataError(first.path(),
                    "label slab " + label_slab_.to_string() + " is outside the volume " + shape_to_string(image_dims_));
  }
  layout_.input_shape = {static_cast<std::int64_t>(image_dims_[0]), slab_.depth(), slab_.height(), slab_.width()};
  layout_.target_shape = {label_slab_.depth(), label_slab_.height(), label_slab_.width()};
  layout_.target_kind = TargetKind::kVoxelLabels;
}

void Unet3dDataset::load_sample(std::size_t index, std::uint64_t /*augment_seed*/, const SampleBuffers& out) const {
  Hdf5File file(files_.at(index));
  const auto image_dims = file.dims(options_.image_dataset);
  if (image_dims != image_dims_) {
    throw DataError(file.path(), "dataset '" + options_.image_dataset + "' has shape " + shape_to_string(image_dims) +
                                     ", expected " + shape_to_string(image_dims_) + " like " + files_.front());
  }
  const auto label_dims = file.dims(options_.label_dataset);
  if (label_dims != spatial_dims_of_image(image_dims_)) {
    throw DataError(file.path(), "dataset '" + options_.label_dataset + "' has shape " + shape_to_string(label_dims) +
                                     ", expected " + shape_to_string(spatial_dims_of_image(image_dims_)));
  }
  const std::vector<std::uint64_t> spatial_start = {std::uint64_t(slab_.z0), std::uint64_t(slab_.y0),
                                                    std::uint64_t(slab_.x0)};
  const std::vector<std::uint64_t> spatial_count = {std::uint64_t(slab_.depth()), std::uint64_t(slab_.height()),
                                                    std::uint64_t(slab_.width())};
  // Stored channels-first already, so the hyperslab lands directly in NCDHW order.
  file.read_float(options_.image_dataset, {0, spatial_start[0], spatial_start[1], spatial_start[2]},
                  {image_dims_[0], spatial_count[0], spatial_count[1], spatial_count[2]}, out.input);
  const std::int64_t voxels = label_slab_.depth() * label_slab_.height() * label_slab_.width();
  // Kept per loader thread: a slab's worth of doubles (16 MiB at 128^3) is not allocated and faulted in per sample.
  thread_local std::vector<double> labels;
  labels.resize(static_cast<std::size_t>(voxels));
  file.read_double(
      options_.label_dataset,
      {std::uint64_t(label_slab_.z0), std::uint64_t(label_slab_.y0), std::uint64_t(label_slab_.x0)},
      {std::uint64_t(label_slab_.depth()), std::uint64_t(label_slab_.height()), std::uint64_t(label_slab_.width())},
      labels.data());
  const std::size_t inputs = image_dims_[0] * static_cast<std::size_t>(slab_.depth() * slab_.height() * slab_.width());
  for (std::size_t i = 0; i < inputs; ++i)
    if (!std::isfinite(out.input[i]))
      throw DataError(file.path(), "dataset '" + options_.image_dataset + "' holds " + std::to_string(out.input[i]) +
                                       " in the box read: the image must be finite");
  for (std::int64_t v = 0; v < voxels; ++v) {
    const double y = labels[static_cast<std::size_t>(v)];
    if (y >= 0 && y < options_.classes && y == std::floor(y)) {
      out.target_labels[v] = static_cast<std::int32_t>(y);
      continue;
    }
    const std::int64_t plane = label_slab_.height() * label_slab_.width();
    // As stored, in the fewest digits that give it back (0.9 of a float dataset reads "0.9", 2^32 + 1 is itself).
    char stored[32];
    const float as_float = static_cast<float>(y);
    const auto end = static_cast<double>(as_float) == y ? std::to_chars(stored, stored + sizeof stored, as_float).ptr
                                                        : std::to_chars(stored, stored + sizeof stored, y).ptr;
    throw DataError(file.path(), "dataset '" + options_.label_dataset + "' has label " + std::string(stored, end) +
                                     " at (" + std::to_string(label_slab_.z0 + v / plane) + ", " +
                                     std::to_string(label_slab_.y0 + v % plane / label_slab_.width()) + ", " +
                                     std::to_string(label_slab_.x0 + v % label_slab_.width()) +
                                     "), not a whole number in 0.." + std::to_string(options_.classes - 1) +
                                     " (--classes " + std::to_string(options_.classes) + ")");
  }
}

}  // namespace fanstore::trainer::data
