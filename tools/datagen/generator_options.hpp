// What every generator is asked for: where, how many samples, how big, which seed, how much validation.
#pragma once

#include <cstdint>
#include <string>

namespace fanstore::datagen {

struct GeneratorOptions {
  std::string output_dir;
  std::uint64_t samples = 0;  // train + val
  int size = 0;               // image side or volume edge; 0 = the generator's default
  int classes = 10;           // image folder only
  std::uint64_t seed = 1;
  double val_fraction = 0.1;
  int threads = 1;
};

// Split tags mixed into each sample's seed, so train and val samples never share a stream.
enum class Split : std::uint64_t { kTrain = 1, kVal = 2 };

}  // namespace fanstore::datagen
