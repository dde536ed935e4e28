// 3D U-Net reader: HDF5 cases `image` (C,D,H,W) + `label` (D,H,W) -> NCDHW float volumes + int voxel labels.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainer/data/hdf5_volume.hpp"
#include "trainer/data/sample_dataset.hpp"

namespace fanstore::trainer::data {

struct Unet3dOptions {
  // The spatial box of `image` this rank reads; empty = whole volume.
  std::optional<Slab> slab{};
  // The box of `label` it reads; empty = the same as `slab`. Under spatial parallelism the image box
  // carries the first layer's halo while the labels are only those of the rank's own output slab.
  std::optional<Slab> label_slab{};
  std::string image_dataset = "image";
  std::string label_dataset = "label";
  // Labels lie in [0, classes) (KiTS19: background, kidney, tumour); another is a DataError naming the file.
  std::int32_t classes = 3;
};

// Samples are the sorted *.h5/*.hdf5 files of `directory`; the first fixes (C,D,H,W) and every
// other must match. Output: input (C, slab D, H, W) float32 as stored (the generator already
// normalises; KiTS19 preprocessing belongs to the pack step), target (label slab D, H, W) int32 labels.
class Unet3dDataset : public SampleDataset {
 public:
  Unet3dDataset(std::string directory, Unet3dOptions options);

  const std::vector<std::uint64_t>& image_dims() const { return image_dims_; }  // (C, D, H, W)
  const Slab& slab() const { return slab_; }
  const Slab& label_slab() const { return label_slab_; }

  std::size_t size() const override { return files_.size(); }
  const SampleLayout& layout() const override { return layout_; }
  std::string sample_path(std::size_t index) const override { return files_[index]; }
  void load_sample(std::size_t index, std::uint64_t augment_seed, const SampleBuffers& out) const override;

 private:
  Unet3dOptions options_;
  std::vector<std::string> files_;
  std::vector<std::uint64_t> image_dims_;
  Slab slab_, label_slab_;
  SampleLayout layout_;
};

}  // namespace fanstore::trainer::data
