// A CosmoFlow small enough for unit tests (32^3, batch 1, one CPU thread), shared by the checkpoint and the
// tournament tests.
#pragma once

#include <cstdint>
#include <memory>

#include "trainer/models.hpp"

namespace fanstore::trainer {

inline std::unique_ptr<Model> small_cosmoflow(std::uint64_t seed) {
  ModelOptions o;
  o.batch = 1;
  o.input_size = 32;
  o.seed = seed;
  return build_model("cosmoflow", make_cpu_backend({1}), o);
}

}  // namespace fanstore::trainer
