// fanstore-datagen: command-line front end for the synthetic dataset generators (logic in generators).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "generators.hpp"

int main(int argc, char** argv) {
  using fanstore::datagen::GeneratorOptions;
  CLI::App app{"Generate learnable synthetic datasets for fanstore-train (image folder, CosmoFlow, 3D U-Net)"};
  app.require_subcommand(1);
  GeneratorOptions options;

  // --size 0 or below took the default silently. (Any edge is data; which ones a model takes, fanstore-train says.)
  const CLI::Validator size_rule(
      [](std::string& text) -> std::string {
        long long v = 0;
        if (CLI::detail::lexical_cast(text, v) && v >= 1 && v <= 1 << 20) return {};
        return "a whole number from 1 to 1048576 is needed, not " + text;
      },
      "1..1048576");
  auto add_common = [&](CLI::App* command, int default_size) {
    command->add_option("-o,--output", options.output_dir, "Output directory (created; must be new or empty)")
        ->required();
    command->add_option("--samples", options.samples, "Number of samples, train + val")->required();
    command
        ->add_option("--size", options.size,
                     "Image side / volume edge in pixels (default " + std::to_string(default_size) + ")")
        ->check(size_rule);
    command->add_option("--seed", options.seed, "Seed: same seed, same bytes")->capture_default_str();
    command->add_option("--val-fraction", options.val_fraction, "Fraction of samples in val/")->capture_default_str();
    command->add_option("--threads", options.threads, "Generator threads (output does not depend on it)")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
  };
  CLI::App* imagefolder =
      app.add_subcommand("imagefolder", "ImageNet-style tree of JPEGs: DIR/{train,val}/<class>/*.jpg");
  add_common(imagefolder, 64);
  imagefolder->add_option("--classes", options.classes, "Number of classes")->capture_default_str();
  CLI::App* cosmoflow = app.add_subcommand("cosmoflow", "CosmoFlow HDF5 universes: DIR/{train,val}/univ_*.h5");
  add_common(cosmoflow, 32);
  CLI::App* unet3d = app.add_subcommand("unet3d", "3D U-Net HDF5 cases: DIR/{train,val}/case_*.h5");
  add_common(unet3d, 64);

  // One line and exit status 1, as the other errors (CLI11's own are two lines and 101-127).
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "fanstore-datagen: error: " + std::string(e.what()) + " (--help lists the options)\n";
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (dynamic_cast<const CLI::RequiredError*>(&e) && app.get_subcommands().empty()) {
      std::fprintf(stderr,
                   "fanstore-datagen: error: give a dataset kind: imagefolder, cosmoflow or unet3d "
                   "(--help says what each makes)\n");
      return 1;
    }
    const int status = app.exit(e);
    return dynamic_cast<const CLI::Success*>(&e) ? status : 1;
  }
  try {
    const auto started = std::chrono::steady_clock::now();
    std::string summary;
    if (imagefolder->parsed()) summary = fanstore::datagen::generate_imagefolder(options);
    if (cosmoflow->parsed()) summary = fanstore::datagen::generate_cosmoflow(options);
    if (unet3d->parsed()) summary = fanstore::datagen::generate_unet3d(options);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("fanstore-datagen: %s (%.2f s)\n", summary.c_str(), seconds);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "fanstore-datagen: error: out of memory: one sample at this --size needs more memory than this "
                 "process could get; give a smaller --size\n");
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fanstore-datagen: error: %s\n", error.what());
    return 1;
  }
  return 0;
}
