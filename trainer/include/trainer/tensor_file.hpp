// The tensor exchange file: named float32 tensors, used to swap weights, inputs, outputs and
// gradients with PyTorch (format spec in docs/trainer.md, "Tensor exchange format").
#pragma once

#include <string>
#include <vector>

#include "trainer/parameters.hpp"
#include "trainer/tensor.hpp"

namespace fanstore::trainer {

struct NamedTensor {
  std::string name;
  Shape shape;
  std::vector<float> data;  // plain layout, numel(shape) values
};

inline constexpr char kTensorFileMagic[8] = {'F', 'S', 'T', 'E', 'N', 'S', 'O', 'R'};
inline constexpr std::uint32_t kTensorFileVersion = 1;

// Throws std::runtime_error naming the path on I/O or format errors.
void write_tensor_file(const std::string& path, const std::vector<NamedTensor>& tensors);
std::vector<NamedTensor> read_tensor_file(const std::string& path);
const NamedTensor& find_tensor(const std::vector<NamedTensor>& tensors, const std::string& name);

NamedTensor to_named(const std::string& name, const Tensor& plain);
// Every parameter then every buffer, in declaration order, under their state_dict names.
std::vector<NamedTensor> export_state(const ParameterTable& table);
// Copies every parameter and buffer of the table from `tensors` (by name; shapes must match).
void import_state(ParameterTable& table, const std::vector<NamedTensor>& tensors);

}  // namespace fanstore::trainer
