// The three synthetic dataset generators behind `fanstore-datagen`; each returns a one-line summary.
#pragma once

#include <string>

#include "generator_options.hpp"

namespace fanstore::datagen {

// DIR/{train,val}/class_KKKK/img_NNNNNNN.jpg: class k = stripe hue bin k/2 x stripe orientation k%2.
std::string generate_imagefolder(const GeneratorOptions& options);

// DIR/{train,val}/univ_NNNNN.h5: `full` (S,S,S,4) float32 particle counts, `unitPar` (4,) float32.
std::string generate_cosmoflow(const GeneratorOptions& options);

// DIR/{train,val}/case_NNNNN.h5: `image` (1,S,S,S) float32, `label` (S,S,S) uint8 (0 bg, 1 kidney, 2 tumor).
std::string generate_unet3d(const GeneratorOptions& options);

}  // namespace fanstore::datagen
