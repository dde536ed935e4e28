// Host implementations of the backend ops that are not oneDNN primitives: element-wise, box copies,
// dropout, normalisation statistics, losses and optimizer updates. The CPU backend calls these; the
// conformance suite uses them as the reference the CUDA backend is held to.
#pragma once

#include <vector>

#include "trainer/backend.hpp"

namespace fanstore::trainer::cpu {

// All tensors in host memory; shapes and layouts were checked by the caller unless noted.
void axpby(float a, const Tensor& x, float b, Tensor& y);
void fill(Tensor& t, float value);
bool all_finite(const Tensor& t);
void copy_box(const Tensor& src, const Box& src_box, Tensor& dst, const Box& dst_box, CopyMode mode);
Tensor dropout(const Tensor& x, const DropoutMask& mask);

Tensor norm_sums(const Tensor& x, NormGroups groups);
Tensor norm_apply(const Tensor& x, const Tensor& sums, double count, const Tensor& gamma, const Tensor& beta,
                  float epsilon, NormGroups groups);
Tensor norm_backward_sums(const Tensor& dy, const Tensor& x, const Tensor& sums, double count, float epsilon,
                          NormGroups groups);
Tensor norm_backward_apply(const Tensor& dy, const Tensor& x, const Tensor& sums, const Tensor& backward_sums,
                           double count, const Tensor& gamma, float epsilon, NormGroups groups, Tensor& dgamma,
                           Tensor& dbeta);

void sgd_update(Tensor& weights, const Tensor& gradients, Tensor& momentum, const SgdUpdate& update);
void lars_update(Tensor& weights, const Tensor& gradients, Tensor& momentum,
                 const std::vector<ParameterSegment>& segments, const LarsUpdate& update);
void adam_update(Tensor& weights, const Tensor& gradients, Tensor& first, Tensor& second, const AdamUpdate& update);

}  // namespace fanstore::trainer::cpu
