// The project's one random generator: Philox4x32-10, counter-based, bit-identical on every host, compiler and GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

// The Philox function is also compiled into CUDA kernels (the trainer's dropout masks).
#if defined(__CUDACC__)
#define FANSTORE_HOST_DEVICE __host__ __device__
#else
#define FANSTORE_HOST_DEVICE
#endif

namespace fanstore {

// Why counter-based: the output for counter c under key k is a pure function of (k, c), so any
// process can compute element i of any stream without drawing elements 0..i-1 first. Dataset
// generation can then run samples in any order, and a dropout mask element depends only on
// (seed, step, global element index), so a spatially split run draws exactly the serial run's mask
// and a GPU kernel draws exactly the CPU's. std:: distributions are implementation-defined (they
// differ between libstdc++ and libc++), so nothing here uses them.

struct PhiloxBlock {
  std::uint32_t word[4];
};

// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11; the generator of cuRAND, PyTorch and JAX):
// a bijection of the 128-bit counter (c0..c3) under the 64-bit key (k0, k1). Checked against
// Random123's known-answer vectors in tests/trainer/test_random.cpp.
FANSTORE_HOST_DEVICE inline PhiloxBlock philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2,
                                                      std::uint32_t c3, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;  // the key schedule (Weyl sequence); the bump after round 10 is never used
    k1 += 0xBB67AE85u;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// 128 random bits for position (`index`, `draw`) of the stream named by `key`.
FANSTORE_HOST_DEVICE inline PhiloxBlock random_block(std::uint64_t key, std::uint64_t draw, std::uint64_t index) {
  return philox4x32_10(static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                       static_cast<std::uint32_t>(draw), static_cast<std::uint32_t>(draw >> 32),
                       static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
}

// The keep/drop threshold of a probability p in [0, 1]: a word w is "drawn" (w < threshold) with
// probability threshold / 2^32. Integer compares, so every device decides identically.
FANSTORE_HOST_DEVICE inline std::uint64_t probability_threshold(double p) {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return 0x100000000ull;
  return static_cast<std::uint64_t>(p * 4294967296.0);
}

// One well-mixed 64-bit key from several values (a seed, an epoch, a sample index, a purpose tag),
// by SplitMix64 steps. A hash, not a generator: streams come from RandomStream below.
inline std::uint64_t mix_seed(std::initializer_list<std::uint64_t> parts) {
  std::uint64_t state = 0x6A09E667F3BCC909ull, result = 0;
  for (std::uint64_t part : parts) {
    state ^= part;
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    result = z ^ (z >> 31);
  }
  return result;
}

// A sequential stream over Philox blocks: block b of stream `seed` is random_block(seed, 0, b).
// Everything the project draws in sequence (shuffles, augmentation, synthetic data, weight
// initialisation, tests) uses this one class.
class RandomStream {
 public:
  explicit RandomStream(std::uint64_t seed) : key_(seed) {}

  std::uint32_t next_u32() {
    if (used_ == 4) {
      block_ = random_block(key_, 0, counter_++);
      used_ = 0;
    }
    return block_.word[used_++];
  }
  std::uint64_t next_u64() {
    const std::uint64_t hi = next_u32();
    return (hi << 32) | next_u32();
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform float in [lo, hi), from 24 random bits (weight initialisation, test tensors).
  float uniform_float(float lo, float hi) {
    const float u = static_cast<float>(next_u32() >> 8) * 0x1.0p-24f;
    const float v = lo + (hi - lo) * u;
    return v < hi ? v : lo;  // rounding can reach hi for wide ranges; keep the interval half-open
  }

  // Unbiased integer in [0, n) (Lemire's multiply-and-reject); n must be > 0.
  std::uint64_t below(std::uint64_t n) {
    unsigned __int128 product = static_cast<unsigned __int128>(next_u64()) * n;
    auto low = static_cast<std::uint64_t>(product);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        product = static_cast<unsigned __int128>(next_u64()) * n;
        low = static_cast<std::uint64_t>(product);
      }
    }
    return static_cast<std::uint64_t>(product >> 64);
  }

  bool coin() { return (next_u32() >> 31) != 0; }
  bool chance(double probability) { return next_u32() < probability_threshold(probability); }

  // Standard normal by Box-Muller (one value per call keeps the stream position simple).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1], so log() is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  double normal(double mean, double stddev) { return mean + stddev * normal(); }

  // Poisson counts: Knuth's product method for small means, a rounded normal for large ones.
  std::uint32_t poisson(double mean) {
    if (mean <= 0) return 0;
    if (mean > 30) {
      const double value = std::round(mean + std::sqrt(mean) * normal());
      return value < 0 ? 0u : static_cast<std::uint32_t>(value);
    }
    const double limit = std::exp(-mean);
    std::uint32_t count = 0;
    for (double product = uniform(); product > limit; product *= uniform()) ++count;
    return count;
  }

 private:
  std::uint64_t key_;
  std::uint64_t counter_ = 0;
  PhiloxBlock block_{};
  int used_ = 4;
};

}  // namespace fanstore
