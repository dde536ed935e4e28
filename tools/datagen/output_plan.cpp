// Split arithmetic, output-directory checks and the small thread pool the generators share.
#include "output_plan.hpp"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fanstore/random.hpp"

namespace fanstore::datagen {

SplitCounts split_counts(std::uint64_t samples, double val_fraction) {
  if (samples == 0) throw std::invalid_argument("--samples must be at least 1");
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) throw std::invalid_argument("--val-fraction must be in [0, 1)");
  SplitCounts counts;
  counts.val = static_cast<std::uint64_t>(std::llround(static_cast<double>(samples) * val_fraction));
  counts.train = samples - counts.val;
  if (counts.train == 0) throw std::invalid_argument("--val-fraction leaves no training samples");
  return counts;
}

void prepare_output_dir(const std::string& output_dir) {
  namespace fs = std::filesystem;
  if (fs::exists(output_dir)) {
    if (!fs::is_directory(output_dir)) throw std::runtime_error(output_dir + ": exists and is not a directory");
    if (!fs::is_empty(output_dir)) {
      throw std::runtime_error(output_dir + ": exists and is not empty; choose a new directory");
    }
  }
  make_directories(output_dir);
}

void make_directories(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) throw std::runtime_error(path + ": cannot create directory: " + error.message());
}

void for_each_sample(std::uint64_t count, int threads, const std::function<void(std::uint64_t)>& make_sample) {
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto work = [&] {
    for (std::uint64_t i = next++; i < count && !failed; i = next++) {
      try {
        make_sample(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

std::uint64_t sample_seed(std::initializer_list<std::uint64_t> parts) {
  // A purpose tag first, so no dataset stream coincides with one of the trainer's.
  constexpr std::uint64_t kDatagenStream = 0x4441544147454EULL;  // "DATAGEN"
  std::uint64_t seed = mix_seed({kDatagenStream});
  for (std::uint64_t part : parts) seed = mix_seed({seed, part});
  return seed;
}

SplitCounts generate_volume_splits(const GeneratorOptions& options, int edge, const char* prefix,
                                   const std::function<void(const std::string&, int, RandomStream&)>& write) {
  const SplitCounts counts = split_counts(options.samples, options.val_fraction);
  prepare_output_dir(options.output_dir);
  for (Split split : {Split::kTrain, Split::kVal}) {
    const std::uint64_t count = split == Split::kTrain ? counts.train : counts.val;
    if (count == 0) continue;
    const std::string dir = options.output_dir + (split == Split::kTrain ? "/train" : "/val");
    make_directories(dir);
    for_each_sample(count, options.threads, [&](std::uint64_t index) {
      RandomStream rng(sample_seed({options.seed, static_cast<std::uint64_t>(split), index}));
      char file[64];
      std::snprintf(file, sizeof file, "/%s_%05llu.h5", prefix, static_cast<unsigned long long>(index));
      write(dir + file, edge, rng);
    });
  }
  return counts;
}

}  // namespace fanstore::datagen
