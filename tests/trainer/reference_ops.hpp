// Naive-loop reference implementations of every layer's forward pass, for checking the backends.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/backend.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer::reference {

// All tensors plain. 2D inputs (N, C, H, W) are handled as 3D with D = 1.
Tensor convolution(const Tensor& x, const Tensor& w, const Tensor* b, const ConvolutionSpec& spec);
Tensor pooling(const Tensor& x, const PoolingSpec& spec);
// Train: batch statistics (biased variance); Eval: the given mean/variance.
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor* mean, const Tensor* variance,
                  double epsilon);
Tensor instance_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon);
Tensor eltwise(const Tensor& x, const EltwiseSpec& spec);
Tensor linear(const Tensor& x, const Tensor& w, const Tensor* b);
Tensor global_average(const Tensor& x);
Tensor concat_channels(const std::vector<Tensor>& xs);

}  // namespace fanstore::trainer::reference
