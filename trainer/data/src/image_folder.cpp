// Image-folder scan (sorted classes and files) and per-sample decode + augmentation into CHW floats.
#include "trainer/data/image_folder.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trainer/data/data_error.hpp"
#include "trainer/data/posix_file.hpp"

namespace fanstore::trainer::data {
namespace {

const std::vector<std::string> kJpegSuffixes = {".jpg", ".jpeg"};

}  // namespace

ImageFolderDataset::ImageFolderDataset(std::string root, ImageFolderOptions options)
    : root_(std::move(root)), options_(options) {
  if (options_.output_size <= 0) throw DataError(root_, "image folder output_size must be positive");
  for (const auto& entry : list_directory(root_)) {
    if (!entry.is_directory || entry.name.starts_with(".")) continue;
    const std::string class_dir = join_path(root_, entry.name);
    const int label = static_cast<int>(class_names_.size());
    std::size_t files_in_class = 0;
    for (const auto& file : list_directory(class_dir)) {
      if (!file.is_regular_file || !has_suffix(file.name, kJpegSuffixes)) continue;
      paths_.push_back(join_path(class_dir, file.name));
      labels_.push_back(label);
      ++files_in_class;
    }
    // An empty class leaves a label without samples (torchvision's ImageFolder refuses it too);
    // it almost always means an incomplete copy of the dataset.
    if (files_in_class == 0) throw DataError(class_dir, "class directory has no .jpg/.jpeg files");
    class_names_.push_back(entry.name);
  }
  if (class_names_.empty()) throw DataError(root_, "no class directories (expected ROOT/<class>/*.jpg)");
  const std::int64_t size = options_.output_size;
  if (options_.region && !options_.region->fits_in(1, size, size))
    throw DataError(root_, "region " + options_.region->to_string() + " is outside the " + std::to_string(size) + "x" +
                               std::to_string(size) + " image");
  layout_.input_shape = {3, options_.region ? options_.region->height() : size,
                         options_.region ? options_.region->width() : size};
  layout_.target_shape = {};
  layout_.target_kind = TargetKind::kClassIndex;
}

void ImageFolderDataset::load_sample(std::size_t index, std::uint64_t augment_seed, const SampleBuffers& out) const {
  const std::string& path = paths_.at(index);
  const RgbImage image = decode_jpeg(read_file_bytes(path), path);
  SourceWindow window;
  bool flip = false;
  if (options_.training) {
    RandomStream rng(augment_seed);
    window = random_resized_crop_window(image.height, image.width, options_.crop, rng);
    flip = rng.coin();
  } else {
    const int resize_size = static_cast<int>(std::lround(options_.output_size * options_.resize_ratio));
    window = resize_center_crop_window(image.height, image.width, resize_size, options_.output_size);
  }
  if (!options_.region) {
    render_window_chw(image, window, options_.output_size, flip, options_.normalization, out.input);
  } else {
    const std::int64_t size = options_.output_size;
    const Slab& r = *options_.region;
    std::vector<float> whole(static_cast<std::size_t>(3 * size * size));
    render_window_chw(image, window, options_.output_size, flip, options_.normalization, whole.data());
    float* to = out.input;
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t y = r.y0; y < r.y1; ++y, to += r.width()) {
        const float* from = whole.data() + (c * size + y) * size + r.x0;
        std::copy(from, from + r.width(), to);
      }
  }
  out.target_labels[0] = labels_[index];
}

}  // namespace fanstore::trainer::data
