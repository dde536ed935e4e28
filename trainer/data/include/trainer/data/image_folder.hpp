// ImageNet-style image-folder reader: root/<class>/*.jpg -> normalised NCHW float samples + class index.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainer/data/hdf5_volume.hpp"
#include "trainer/data/image_transforms.hpp"
#include "trainer/data/sample_dataset.hpp"

namespace fanstore::trainer::data {

struct ImageFolderOptions {
  int output_size = 224;
  // true: random-resized-crop + random horizontal flip (training); false: resize + center crop.
  bool training = true;
  RandomResizedCropParams crop{};
  // Validation: the shorter side is resized to round(output_size * resize_ratio) (256 for 224).
  double resize_ratio = 256.0 / 224.0;
  Normalization normalization{};
  // Spatial parallelism: keep only rows [y0, y1) and columns [x0, x1) of the output_size^2 sample
  // (z0/z1 unused). Every rank renders the same augmented image (the augmentation depends only on the
  // seed and the sample) and keeps its slab; a JPEG cannot be decoded in parts. Empty = whole image.
  std::optional<Slab> region{};
};

// Classes are the sub-directories of `root` sorted by name (label = position, like torchvision's
// ImageFolder); samples are their *.jpg / *.jpeg files sorted by name, class by class. The scan
// happens once in the constructor, which throws DataError for a missing root, a root without
// class directories, or a class directory without JPEG files (naming that directory).
class ImageFolderDataset : public SampleDataset {
 public:
  ImageFolderDataset(std::string root, ImageFolderOptions options);

  const std::vector<std::string>& class_names() const { return class_names_; }
  int label_of(std::size_t index) const { return labels_[index]; }

  std::size_t size() const override { return paths_.size(); }
  const SampleLayout& layout() const override { return layout_; }
  std::string sample_path(std::size_t index) const override { return paths_[index]; }
  void load_sample(std::size_t index, std::uint64_t augment_seed, const SampleBuffers& out) const override;

 private:
  std::string root_;
  ImageFolderOptions options_;
  SampleLayout layout_;
  std::vector<std::string> class_names_;
  std::vector<std::string> paths_;
  std::vector<int> labels_;
};

}  // namespace fanstore::trainer::data
