// Separable Gaussian smoothing of a periodic cube: the correlated random field behind CosmoFlow samples.
#pragma once

#include <vector>

namespace fanstore::datagen {

// Smooths an edge^3 cube (row-major z,y,x) in place with a Gaussian of `sigma` voxels, wrapping at
// the faces because a simulated universe is periodic.
void smooth_periodic_cube(std::vector<float>& cube, int edge, double sigma);

}  // namespace fanstore::datagen
