// Model registry: builds a model by its command-line name.
#include <stdexcept>

#include "trainer/models.hpp"

namespace fanstore::trainer {

std::unique_ptr<Model> build_model(const std::string& name, std::shared_ptr<Backend> backend,
                                   const ModelOptions& options) {
  if (name == "resnet50") return build_resnet50(std::move(backend), options);
  if (name == "unet3d") return build_unet3d(std::move(backend), options);
  if (name == "cosmoflow") return build_cosmoflow(std::move(backend), options);
  throw std::invalid_argument("unknown model '" + name + "' (choose resnet50, unet3d or cosmoflow)");
}

}  // namespace fanstore::trainer
