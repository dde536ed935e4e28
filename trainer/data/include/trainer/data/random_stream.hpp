// Portable seeded random numbers (xoshiro256**): identical on every rank, compiler and standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace fanstore::trainer::data {

// std:: distributions are implementation-defined, so two ranks built differently could disagree on
// a shuffle; everything here is spelled out bit for bit instead.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Combines several values (seed, epoch, sample index, a purpose tag) into one well-mixed seed.
inline std::uint64_t mix_seed(std::initializer_list<std::uint64_t> parts) {
  std::uint64_t state = 0x6A09E667F3BCC909ull;
  std::uint64_t result = 0;
  for (std::uint64_t part : parts) {
    state ^= part;
    result = splitmix64(state);
  }
  return result;
}

// Purpose tags, so the shuffle and the augmentation of one (seed, epoch) never share a stream.
inline constexpr std::uint64_t kShuffleStream = 0x53485546464C45ull;   // "SHUFFLE"
inline constexpr std::uint64_t kAugmentStream = 0x4155474D454E54ull;   // "AUGMENT"

class RandomStream {
 public:
  explicit RandomStream(std::uint64_t seed) {
    for (auto& word : state_) word = splitmix64(seed);
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

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

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

  bool coin() { return (next_u64() >> 63) != 0; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t state_[4];
};

}  // namespace fanstore::trainer::data
