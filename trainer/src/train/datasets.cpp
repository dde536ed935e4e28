// Reader per model, and model options derived from the data (classes, edges, channels).
#include "trainer/train_data.hpp"

#include <stdexcept>

#include "trainer/data/cosmoflow_dataset.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/image_folder.hpp"
#include "trainer/data/unet3d_dataset.hpp"
#include "trainer/shape.hpp"

namespace fanstore::trainer {

namespace {

// A 3D slab (D, H, W) as the readers' Slab, shifted by (dz, dy, dx).
data::Slab to_slab(const SpatialBox& b, std::int64_t dz = 0, std::int64_t dy = 0, std::int64_t dx = 0) {
  return data::Slab{b.axes.at(0).lo + dz, b.axes.at(0).hi + dz, b.axes.at(1).lo + dy,
                    b.axes.at(1).hi + dy, b.axes.at(2).lo + dx, b.axes.at(2).hi + dx};
}

}  // namespace

std::unique_ptr<data::SampleDataset> open_dataset(const std::string& model, const std::string& directory, bool training,
                                                  std::int64_t image_size, std::int64_t classes, const SlabRead* slab) {
  if (model == "resnet50") {
    data::ImageFolderOptions o;
    o.output_size = static_cast<int>(image_size > 0 ? image_size : 224);
    o.training = training;
    if (slab)
      o.region = data::Slab{0,
                            1,
                            slab->input.axes.at(0).lo,
                            slab->input.axes.at(0).hi,
                            slab->input.axes.at(1).lo,
                            slab->input.axes.at(1).hi};
    return std::make_unique<data::ImageFolderDataset>(directory, o);
  }
  if (model == "cosmoflow") {
    data::CosmoFlowOptions o;
    if (slab) o.slab = to_slab(slab->input);
    auto dataset = std::make_unique<data::CosmoFlowDataset>(directory, o);
    const auto edge = static_cast<std::int64_t>(dataset->layout().input_shape.at(1));
    if (!slab && image_size > 0 && image_size != edge)  // (a slab's edge is its own; the whole was checked first)
      throw data::DataError(directory, "holds volumes of " + std::to_string(edge) + "^3 but --input-size is " +
                                           std::to_string(image_size) +
                                           ": CosmoFlow trains at the files' size, so leave --input-size out");
    return dataset;
  }
  if (model == "unet3d") {
    data::Unet3dOptions o;
    if (classes > 0) o.classes = static_cast<std::int32_t>(classes);
    auto whole = std::make_unique<data::Unet3dDataset>(directory, o);
    const auto& dims = whole->image_dims();  // (C, D, H, W)
    const auto h = static_cast<std::int64_t>(dims.at(2)), w = static_cast<std::int64_t>(dims.at(3));
    const bool windowed = image_size > 0 && !(image_size == h && image_size == w);
    if (!windowed && !slab) return whole;
    if (image_size > h || image_size > w)
      throw data::DataError(directory, "--input-size " + std::to_string(image_size) +
                                           " is larger than the stored slices (" + std::to_string(h) + " x " +
                                           std::to_string(w) + ")");
    // A centred image_size x image_size window of every slice, full depth: a smaller, deterministic
    // patch (MLPerf trains on patches of larger cases) read as one hyperslab; a rank of a spatial split
    // reads its slab of that window.
    const std::int64_t y0 = windowed ? (h - image_size) / 2 : 0, x0 = windowed ? (w - image_size) / 2 : 0;
    const std::int64_t edge_h = windowed ? image_size : h, edge_w = windowed ? image_size : w;
    o.slab = data::Slab{0, static_cast<std::int64_t>(dims.at(1)), y0, y0 + edge_h, x0, x0 + edge_w};
    if (slab) {
      o.slab = to_slab(slab->input, 0, y0, x0);
      o.label_slab = to_slab(slab->labels, 0, y0, x0);
    }
    return std::make_unique<data::Unet3dDataset>(directory, o);
  }
  throw std::invalid_argument("unknown model '" + model + "' (expected resnet50, unet3d or cosmoflow)");
}

ModelOptions model_options_for(const std::string& model, const data::SampleDataset& dataset,
                               const std::string& directory, std::int64_t batch, std::int64_t classes,
                               std::uint64_t seed) {
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
      throw data::DataError(
          directory, "has " + std::to_string(found) + " class directories but --classes is " + std::to_string(classes));
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
    if (in.at(2) != in.at(3))
      throw data::DataError(directory, "unet3d needs square slices (H = W), got " + Shape(in).to_string());
    o.input_depth = in.at(1);
    o.input_size = in.at(2);
    o.classes = classes > 0 ? classes : data::Unet3dOptions{}.classes;
  }
  return o;
}

void require_same_layout(const data::SampleDataset& reference, const data::SampleDataset& other,
                         const std::string& directory) {
  const auto& a = reference.layout();
  const auto& b = other.layout();
  if (a.input_shape != b.input_shape)
    throw data::DataError(directory, "samples have shape " + Shape(b.input_shape).to_string() + ", the training data " +
                                         Shape(a.input_shape).to_string());
  if (a.target_shape != b.target_shape)
    throw data::DataError(directory, "targets have shape " + Shape(b.target_shape).to_string() +
                                         ", the training data's " + Shape(a.target_shape).to_string() +
                                         ": give --val data with the training data's targets");
  // An image folder's label is its class directory's position: other classes would score against wrong labels.
  const auto* ref = dynamic_cast<const data::ImageFolderDataset*>(&reference);
  const auto* oth = dynamic_cast<const data::ImageFolderDataset*>(&other);
  if (ref && oth && ref->class_names() != oth->class_names()) {
    const auto& r = ref->class_names();
    const auto& o = oth->class_names();
    std::size_t k = 0;
    while (k < r.size() && k < o.size() && r[k] == o[k]) ++k;
    const auto name = [](const std::vector<std::string>& v, std::size_t i) { return i < v.size() ? v[i] : "none"; };
    throw data::DataError(directory, "has " + std::to_string(o.size()) + " class directories, the training data " +
                                         std::to_string(r.size()) + "; class " + std::to_string(k) + " is '" +
                                         name(o, k) + "' here and '" + name(r, k) +
                                         "' there: give --val the same class directories");
  }
}

}  // namespace fanstore::trainer
