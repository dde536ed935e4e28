// Synthetic ImageNet-style JPEG tree: each class is a stripe colour and orientation, plus noise.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "fanstore/random.hpp"
#include "generators.hpp"
#include "jpeg_writer.hpp"
#include "output_plan.hpp"

namespace fanstore::datagen {
namespace {

constexpr double kPi = 3.141592653589793;
constexpr int kDefaultSize = 64;
constexpr int kJpegQuality = 90;

struct Rgb {
  double r, g, b;
};

// hue, saturation, value in [0,1] -> RGB in [0,255].
Rgb hsv_to_rgb(double hue, double saturation, double value) {
  hue = (hue - std::floor(hue)) * 6.0;
  const int sector = static_cast<int>(hue) % 6;
  const double f = hue - std::floor(hue);
  const double p = value * (1 - saturation), q = value * (1 - saturation * f), t = value * (1 - saturation * (1 - f));
  const double table[6][3] = {{value, t, p}, {q, value, p}, {p, value, t}, {p, q, value}, {t, p, value}, {value, p, q}};
  return Rgb{table[sector][0] * 255, table[sector][1] * 255, table[sector][2] * 255};
}

std::string class_name(int label) {
  char name[32];
  std::snprintf(name, sizeof name, "class_%04d", label);
  return name;
}

// Why these features: colour and a horizontal/vertical orientation both survive random-resized
// crops (down to 8% of the area) and horizontal flips, so a CNN can learn them from augmented
// crops; the per-image jitter, frequency, phase, background and noise keep it from being trivial.
std::vector<std::uint8_t> render_image(int label, int classes, int size, RandomStream& rng) {
  const int hue_bins = std::max(1, (classes + 1) / 2);
  const double hue = (label / 2 + rng.uniform(-0.3, 0.3)) / hue_bins;
  const Rgb stripe = hsv_to_rgb(hue, rng.uniform(0.6, 1.0), rng.uniform(0.75, 1.0));
  const double grey = rng.uniform(15, 70);
  const Rgb background{grey + rng.uniform(-10, 10), grey + rng.uniform(-10, 10), grey + rng.uniform(-10, 10)};
  const double angle = ((label % 2) * 90.0 + rng.uniform(-20, 20)) * kPi / 180.0;
  const double cycles = rng.uniform(2.5, 6.0);
  const double phase = rng.uniform(0, 2 * kPi);
  const double noise = rng.uniform(4, 14);
  const double dx = std::cos(angle) * cycles / size, dy = std::sin(angle) * cycles / size;

  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(size) * size * 3);
  auto to_byte = [](double v) { return static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L)); };
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      const double t = 0.5 + 0.5 * std::sin(2 * kPi * (x * dx + y * dy) + phase);
      std::uint8_t* pixel = &rgb[(static_cast<std::size_t>(y) * size + x) * 3];
      pixel[0] = to_byte(background.r + (stripe.r - background.r) * t + noise * rng.normal());
      pixel[1] = to_byte(background.g + (stripe.g - background.g) * t + noise * rng.normal());
      pixel[2] = to_byte(background.b + (stripe.b - background.b) * t + noise * rng.normal());
    }
  }
  return rgb;
}

void generate_split(const GeneratorOptions& options, int size, Split split, const std::string& split_dir,
                    std::uint64_t count) {
  for (int label = 0; label < options.classes; ++label) make_directories(split_dir + "/" + class_name(label));
  for_each_sample(count, options.threads, [&](std::uint64_t index) {
    // Round-robin classes: every class gets a file whenever count >= classes.
    const int label = static_cast<int>(index % static_cast<std::uint64_t>(options.classes));
    RandomStream rng(sample_seed({options.seed, static_cast<std::uint64_t>(split), index}));
    char file[48];
    std::snprintf(file, sizeof file, "/img_%07llu.jpg", static_cast<unsigned long long>(index));
    write_jpeg(split_dir + "/" + class_name(label) + file, render_image(label, options.classes, size, rng), size, size,
               kJpegQuality);
  });
}

}  // namespace

std::string generate_imagefolder(const GeneratorOptions& options) {
  const int size = options.size > 0 ? options.size : kDefaultSize;
  if (options.classes < 1) throw std::invalid_argument("--classes must be at least 1");
  const SplitCounts counts = split_counts(options.samples, options.val_fraction);
  const auto classes = static_cast<std::uint64_t>(options.classes);
  // An empty class directory is an error for the reader (and torchvision), so refuse to make one.
  if (counts.train < classes || (counts.val > 0 && counts.val < classes)) {
    throw std::invalid_argument("--samples " + std::to_string(options.samples) + " gives " +
                                std::to_string(counts.train) + " train / " + std::to_string(counts.val) +
                                " val images; each split needs at least --classes (" + std::to_string(classes) +
                                "): give more --samples or fewer --classes");
  }
  prepare_output_dir(options.output_dir);
  generate_split(options, size, Split::kTrain, options.output_dir + "/train", counts.train);
  if (counts.val > 0) generate_split(options, size, Split::kVal, options.output_dir + "/val", counts.val);
  return "imagefolder: " + std::to_string(counts.train) + " train + " + std::to_string(counts.val) + " val JPEGs, " +
         std::to_string(size) + "x" + std::to_string(size) + ", " + std::to_string(classes) + " classes in " +
         options.output_dir;
}

}  // namespace fanstore::datagen
