// Model builders: ResNet-50 (torchvision v1.5), 3D U-Net (MLPerf), CosmoFlow (MLPerf HPC).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/model.hpp"

namespace fanstore::trainer {

struct ModelOptions {
  std::int64_t batch = 1;
  std::int64_t input_size = 0;      // spatial edge; 0 = the model's default (224, 128, 128)
  std::int64_t input_depth = 0;     // unet3d only: depth D when the volume is not a cube (0 = input_size)
  std::int64_t classes = 0;         // output classes/targets; 0 = the model's default (1000, 3, 4)
  std::int64_t in_channels = 0;     // 0 = the model's default (3, 1, 4)
  float dropout = 0.f;              // CosmoFlow only: dropout after each hidden dense layer (0 = none)
  bool zero_init_residual = false;  // ResNet only: start each bottleneck's last BN scale at 0 (torchvision's option)
  std::uint64_t seed = 0;           // initialisation seed
};

// torchvision.models.resnet50 (v1.5: the stride sits on the bottleneck's 3x3 convolution);
// 25,557,032 parameters at 1000 classes. Input (N, 3, S, S), output logits (N, classes).
std::unique_ptr<Model> build_resnet50(std::shared_ptr<Backend> backend, const ModelOptions& options);

// MLPerf image_segmentation 3D U-Net: filters 32/64/128/256/320, instance norm, conv-norm-ReLU,
// strided-conv downsampling, transposed-conv upsampling, skip concat. Input (N, 1, D, S, S) with D
// and S multiples of 32 and one of them at least 64 (instance norm needs more than one voxel at the
// bottleneck); D = S unless input_depth is set. Output logits (N, classes, D, S, S).
std::unique_ptr<Model> build_unet3d(std::shared_ptr<Backend> backend, const ModelOptions& options);

// MLPerf HPC CosmoFlow: 5 x [conv3d k3 'same' (32 * 2^i filters) + LeakyReLU(0.3) + maxpool 2],
// flatten, dense 128 -> 64 -> classes with LeakyReLU(0.3), output 1.2 * tanh. Input (N, 4, S, S, S).
std::unique_ptr<Model> build_cosmoflow(std::shared_ptr<Backend> backend, const ModelOptions& options);

// By name: "resnet50", "unet3d" or "cosmoflow".
std::unique_ptr<Model> build_model(const std::string& name, std::shared_ptr<Backend> backend,
                                   const ModelOptions& options);

}  // namespace fanstore::trainer
