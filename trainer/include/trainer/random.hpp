// Seeded random numbers for initialisation, dropout masks and tests (same seed, same numbers).
#pragma once

#include <cstdint>
#include <random>

namespace fanstore::trainer {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(engine_); }
  float normal(float mean = 0.f, float stddev = 1.f) { return std::normal_distribution<float>(mean, stddev)(engine_); }
  bool bernoulli(double p) { return std::bernoulli_distribution(p)(engine_); }
  std::uint64_t next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace fanstore::trainer
