// The data pipeline's seeds: purpose tags over the project's one generator (fanstore/random.hpp).
#pragma once

#include "fanstore/random.hpp"

namespace fanstore::trainer::data {

using fanstore::mix_seed;
using fanstore::RandomStream;

// Purpose tags, so the shuffle and the augmentation of one (seed, epoch) never share a stream.
inline constexpr std::uint64_t kShuffleStream = 0x53485546464C45ull;  // "SHUFFLE"
inline constexpr std::uint64_t kAugmentStream = 0x4155474D454E54ull;  // "AUGMENT"

}  // namespace fanstore::trainer::data
