// Reading and writing the tensor exchange file (little-endian, versioned).
#include "trainer/tensor_file.hpp"

#include <bit>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace fanstore::trainer {

static_assert(std::endian::native == std::endian::little, "the tensor file is little-endian; add byte swapping");

namespace {

template <class T>
void put(std::ofstream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <class T>
T get(std::ifstream& in, const std::string& path) {
  T v{};
  if (!in.read(reinterpret_cast<char*>(&v), sizeof(T))) throw std::runtime_error(path + ": truncated tensor file");
  return v;
}

}  // namespace

void write_tensor_file(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot open for writing");
  out.write(kTensorFileMagic, sizeof kTensorFileMagic);
  put<std::uint32_t>(out, kTensorFileVersion);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(tensors.size()));
  for (const auto& t : tensors) {
    if (static_cast<std::int64_t>(t.data.size()) != t.shape.numel())
      throw std::invalid_argument(t.name + ": " + std::to_string(t.data.size()) + " values for shape " +
                                  t.shape.to_string());
    put<std::uint32_t>(out, static_cast<std::uint32_t>(t.name.size()));
    out.write(t.name.data(), static_cast<std::streamsize>(t.name.size()));
    put<std::uint32_t>(out, static_cast<std::uint32_t>(t.shape.rank()));
    for (auto d : t.shape.dims) put<std::int64_t>(out, d);
    out.write(reinterpret_cast<const char*>(t.data.data()),
              static_cast<std::streamsize>(t.data.size() * sizeof(float)));
  }
  if (!out) throw std::runtime_error(path + ": write failed");
}

std::vector<NamedTensor> read_tensor_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  char magic[8];
  if (!in.read(magic, sizeof magic) || std::memcmp(magic, kTensorFileMagic, sizeof magic) != 0)
    throw std::runtime_error(path + ": not a FanStore tensor file (bad magic)");
  const auto version = get<std::uint32_t>(in, path);
  if (version != kTensorFileVersion)
    throw std::runtime_error(path + ": tensor file version " + std::to_string(version) + ", this build reads " +
                             std::to_string(kTensorFileVersion) + ": regenerate the file with the matching writer");
  const auto count = get<std::uint32_t>(in, path);
  std::vector<NamedTensor> tensors(count);
  for (auto& t : tensors) {
    t.name.resize(get<std::uint32_t>(in, path));
    in.read(t.name.data(), static_cast<std::streamsize>(t.name.size()));
    const auto rank = get<std::uint32_t>(in, path);
    if (rank > 8)
      throw std::runtime_error(path + ": tensor '" + t.name + "' has implausible rank " + std::to_string(rank));
    for (std::uint32_t i = 0; i < rank; ++i) t.shape.dims.push_back(get<std::int64_t>(in, path));
    t.data.resize(static_cast<std::size_t>(t.shape.numel()));
    if (!in.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * sizeof(float))))
      throw std::runtime_error(path + ": truncated data of tensor '" + t.name + "'");
  }
  return tensors;
}

const NamedTensor& find_tensor(const std::vector<NamedTensor>& tensors, const std::string& name) {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  throw std::runtime_error("tensor '" + name + "' missing from the tensor file");
}

NamedTensor to_named(const std::string& name, const Tensor& plain) {
  if (!plain.is_plain() || plain.device() != Device::Host)
    throw std::invalid_argument(name + ": to_named needs a plain host tensor (Backend::to_host)");
  return {name, plain.shape(), std::vector<float>(plain.data(), plain.data() + plain.numel())};
}

std::vector<NamedTensor> export_state(const ParameterTable& table) {
  std::vector<NamedTensor> out;
  const std::vector<float> values = table.read(Arena::Values), buffers = table.read(Arena::Buffers);
  for (const auto& e : table.parameters())
    out.push_back({e.name, e.shape,
                   std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(e.offset),
                                      values.begin() + static_cast<std::ptrdiff_t>(e.offset) + e.shape.numel())});
  for (const auto& e : table.buffers())
    out.push_back({e.name, e.shape,
                   std::vector<float>(buffers.begin() + static_cast<std::ptrdiff_t>(e.offset),
                                      buffers.begin() + static_cast<std::ptrdiff_t>(e.offset) + e.shape.numel())});
  return out;
}

void import_state(ParameterTable& table, const std::vector<NamedTensor>& tensors) {
  auto load = [&](const ParameterEntry& e, std::vector<float>& arena) {
    const auto& t = find_tensor(tensors, e.name);
    if (t.shape != e.shape)
      throw std::runtime_error(e.name + ": file has shape " + t.shape.to_string() + ", model has " +
                               e.shape.to_string());
    std::copy(t.data.begin(), t.data.end(), arena.begin() + static_cast<std::ptrdiff_t>(e.offset));
  };
  std::vector<float> values = table.read(Arena::Values), buffers = table.read(Arena::Buffers);
  for (const auto& e : table.parameters()) load(e, values);
  for (const auto& e : table.buffers()) load(e, buffers);
  table.write(Arena::Values, values);
  table.write(Arena::Buffers, buffers);
}

}  // namespace fanstore::trainer
