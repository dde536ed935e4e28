// Reader per model, and model options derived from the data (classes, edges, channels).
#include "trainer/train_data.hpp"

#include <stdexcept>

#include "trainer/data/cosmoflow_dataset.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/image_folder.hpp"
#include "trainer/data/unet3d_dataset.hpp"
#include "trainer/shape.hpp"

namespace fanstore::trainer {

std::unique_ptr<data::SampleDataset> open_dataset(const std::string& model, const std::string& directory, bool training,
                                                  std::int64_t image_size) {
  if (model == "resnet50") {
    data::ImageFolderOptions o;
    o.output_size = static_cast<int>(image_size > 0 ? image_size : 224);
    o.training = training;
    return std::make_unique<data::ImageFolderDataset>(directory, o);
  }
  if (model == "cosmoflow") return std::make_unique<data::CosmoFlowDataset>(directory, data::CosmoFlowOptions{});
  if (model == "unet3d") {
    auto whole = std::make_unique<data::Unet3dDataset>(directory, data::Unet3dOptions{});
    const auto& dims = whole->image_dims();  // (C, D, H, W)
    const auto h = static_cast<std::int64_t>(dims.at(2)), w = static_cast<std::int64_t>(dims.at(3));
    if (image_size <= 0 || (image_size == h && image_size == w)) return whole;
    if (image_size > h || image_size > w)
      throw data::DataError(directory, "--input-size " + std::to_string(image_size) + " is larger than the stored slices (" +
                                           std::to_string(h) + " x " + std::to_string(w) + ")");
    // A centred image_size x image_size window of every slice, full depth: a smaller, deterministic
    // patch (MLPerf trains on patches of larger cases) read as one hyperslab.
    data::Unet3dOptions o;
    const std::int64_t y0 = (h - image_size) / 2, x0 = (w - image_size) / 2;
    o.slab = data::Slab{0, static_cast<std::int64_t>(dims.at(1)), y0, y0 + image_size, x0, x0 + image_size};
    return std::make_unique<data::Unet3dDataset>(directory, o);
  }
  throw std::invalid_argument("unknown model '" + model + "' (expected resnet50, unet3d or cosmoflow)");
}

ModelOptions model_options_for(const std::string& model, const data::SampleDataset& dataset, const std::string& directory,
                               std::int64_t batch, std::int64_t classes, std::uint64_t seed) {
  ModelOptions o;
  o.batch = batch;
  o.seed = seed;
  const auto& in = dataset.layout().input_shape;  // (C, H, W) or (C, D, H, W)
  o.in_channels = in.at(0);
  if (model == "resnet50") {
    o.input_size = in.at(1);
    const auto* folder = dynamic_cast<const data::ImageFolderDataset*>(&dataset);
    const auto found = static_cast<std::int64_t>(folder ? folder->class_names().size() : 0);
    if (classes > 0 && classes != found)
      throw data::DataError(directory, "has " + std::to_string(found) + " class directories but --classes is " +
                                           std::to_string(classes));
    o.classes = found;
  } else if (model == "cosmoflow") {
    if (in.at(1) != in.at(2) || in.at(2) != in.at(3))
      throw data::DataError(directory, "cosmoflow needs cubic volumes, got " + Shape(in).to_string());
    o.input_size = in.at(1);
    const auto targets = static_cast<std::int64_t>(dataset.layout().target_elements());
    if (classes > 0 && classes != targets)
      throw data::DataError(directory, "has " + std::to_string(targets) + " targets per sample but --classes is " +
                                           std::to_string(classes));
    o.classes = targets;
  } else {
    if (in.at(2) != in.at(3)) throw data::DataError(directory, "unet3d needs square slices (H = W), got " + Shape(in).to_string());
    o.input_depth = in.at(1);
    o.input_size = in.at(2);
    o.classes = classes > 0 ? classes : 3;
  }
  return o;
}

void require_same_layout(const data::SampleDataset& reference, const data::SampleDataset& other, const std::string& directory) {
  const auto& a = reference.layout();
  const auto& b = other.layout();
  if (a.input_shape != b.input_shape || a.target_shape != b.target_shape)
    throw data::DataError(directory, "samples have shape " + Shape(b.input_shape).to_string() + ", the training data " +
                                         Shape(a.input_shape).to_string());
}

}  // namespace fanstore::trainer
