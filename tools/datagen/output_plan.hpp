// Train/val counts and the output directory: checked up front so a bad command writes nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "fanstore/random.hpp"
#include "generator_options.hpp"

namespace fanstore::datagen {

struct SplitCounts {
  std::uint64_t train = 0;
  std::uint64_t val = 0;
};

// val = round(samples * val_fraction), train = the rest. Throws std::invalid_argument on a
// fraction outside [0, 1), no samples, or an empty training split.
SplitCounts split_counts(std::uint64_t samples, double val_fraction);

// Creates output_dir (and parents). Refuses (std::runtime_error) a non-empty existing directory,
// so two datasets never get mixed in one tree.
void prepare_output_dir(const std::string& output_dir);

// Creates a directory and its parents (no error if it exists).
void make_directories(const std::string& path);

// Calls make_sample(i) for i in [0, count) on `threads` threads. Each sample is seeded on its
// own, so the bytes written do not depend on the thread count. Rethrows the first failure.
void for_each_sample(std::uint64_t count, int threads, const std::function<void(std::uint64_t)>& make_sample);

// The seed of one sample's stream: a pure function of (dataset seed, split, index), so samples can be
// generated in any order and on any thread count.
std::uint64_t sample_seed(std::initializer_list<std::uint64_t> parts);

// The volume datasets' layout: DIR/train/<prefix>_NNNNN.h5 and DIR/val/..., one file per sample, each
// seeded from (seed, split, index). Checks the output directory first; calls write(path, edge, rng)
// per sample on options.threads threads. Returns the split sizes.
SplitCounts generate_volume_splits(const GeneratorOptions& options, int edge, const char* prefix,
                                   const std::function<void(const std::string&, int, RandomStream&)>& write);

}  // namespace fanstore::datagen
