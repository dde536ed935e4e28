// Seeded random numbers for initialisation and tests: the project's one generator (fanstore/random.hpp).
#pragma once

#include "fanstore/random.hpp"

namespace fanstore::trainer {

// Same seed, same numbers, on every compiler, standard library and device.
using Rng = fanstore::RandomStream;

}  // namespace fanstore::trainer
