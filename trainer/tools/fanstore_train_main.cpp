// fanstore-train: parses the command line (CLI11) and calls the trainer library.
#include <iostream>

#include <CLI/CLI.hpp>

#include "trainer/commands.hpp"

int main(int argc, char** argv) {
  using namespace fanstore::trainer;
  CLI::App app{"fanstore-train: the FanStore CNN trainer (CPU backend: oneDNN)"};
  DescribeOptions options;
  bool describe = false;
  app.add_option("--model", options.model, "Model: resnet50, unet3d or cosmoflow")->required();
  app.add_flag("--describe", describe, "Print the layer table (name, type, output shape, parameters) and the total");
  app.add_option("--input-size", options.model_options.input_size,
                 "Spatial edge of the input (0 = model default: resnet50 224, unet3d 128, cosmoflow 128)")
      ->capture_default_str();
  app.add_option("--classes", options.model_options.classes,
                 "Output classes/targets (0 = model default: resnet50 1000, unet3d 3, cosmoflow 4)")
      ->capture_default_str();
  app.add_option("--batch", options.model_options.batch, "Batch size used for the shapes")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!describe) {
    std::cerr << "fanstore-train: nothing to do; pass --describe (training options come with the training issue)\n";
    return 1;
  }
  return describe_command(options, std::cout, std::cerr);
}
