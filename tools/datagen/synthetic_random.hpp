// Deterministic random numbers for the generators: same seed, same dataset bytes, on any machine.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace fanstore::datagen {

// Spelled out (xoshiro256** seeded by splitmix64) instead of std:: distributions, whose output is
// implementation-defined; the trainer's reader has its own copy because the two build separately.
class SyntheticRandom {
 public:
  explicit SyntheticRandom(std::uint64_t seed) {
    for (auto& word : state_) word = splitmix64(seed);
  }

  // One seed per (dataset seed, split, sample): samples can then be generated in any order.
  static std::uint64_t seed_for(std::initializer_list<std::uint64_t> parts) {
    std::uint64_t state = 0xD1B54A32D192ED03ull, result = 0;
    for (std::uint64_t part : parts) {
      state ^= part;
      result = splitmix64(state);
    }
    return result;
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  bool chance(double probability) { return uniform() < probability; }

  // Standard normal by Box-Muller (one value per call keeps the stream position simple).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1], so log() is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

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
  static std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t state_[4];
};

}  // namespace fanstore::datagen
