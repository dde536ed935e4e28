// Chooses the data reader for a model and derives the model's shape options from the data.
#pragma once

#include <memory>
#include <string>

#include "trainer/data/sample_dataset.hpp"
#include "trainer/distributed_grid.hpp"
#include "trainer/models.hpp"

namespace fanstore::trainer {

// Spatial parallelism: what one rank loads of every sample, in the model input's spatial axes
// ((D, H, W) for volumes, (H, W) for images): `input` (its slab plus the first layer's halo) and, for
// voxel labels, `labels` (its output slab).
struct SlabRead {
  SpatialBox input, labels;
};

// resnet50 -> image folder (random-resized-crop + flip when training, resize + center crop when
// not) at image_size; cosmoflow -> CosmoFlow HDF5; unet3d -> U-Net HDF5 (a non-zero image_size
// smaller than the slices reads the centred image_size^2 window of each slice). Throws data::DataError
// naming the directory or file when it is missing or unreadable. With `slab`, each sample is only
// that part (an HDF5 hyperslab; for images, the region of the augmented image). A non-zero `classes` (--classes)
// bounds U-Net's voxel labels (else the model's default).
std::unique_ptr<data::SampleDataset> open_dataset(const std::string& model, const std::string& directory, bool training,
                                                  std::int64_t image_size, std::int64_t classes,
                                                  const SlabRead* slab = nullptr);

// Model options that fit the dataset's samples: input edge/depth/channels from the volume shape,
// classes from the class directories (resnet50) or target count (cosmoflow). A non-zero
// `classes` that contradicts the data is an error naming the directory.
ModelOptions model_options_for(const std::string& model, const data::SampleDataset& dataset,
                               const std::string& directory, std::int64_t batch, std::int64_t classes,
                               std::uint64_t seed);

// Throws data::DataError naming `directory` when its sample shape differs from the reference's.
void require_same_layout(const data::SampleDataset& reference, const data::SampleDataset& other,
                         const std::string& directory);

}  // namespace fanstore::trainer
