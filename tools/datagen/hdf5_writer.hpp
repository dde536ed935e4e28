// Writes whole numeric datasets into a new HDF5 file, byte-reproducibly (no timestamps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fanstore::datagen {

class Hdf5Writer {
 public:
  explicit Hdf5Writer(const std::string& path);  // creates/truncates; throws std::runtime_error
  ~Hdf5Writer();
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  // Contiguous (unchunked) layout: a hyperslab read is then a few plain preads, which is what
  // FanStore serves best. `values` must hold prod(dims) elements.
  void write_float32(const std::string& name, const std::vector<std::uint64_t>& dims, const std::vector<float>& values);
  void write_uint8(const std::string& name, const std::vector<std::uint64_t>& dims,
                   const std::vector<std::uint8_t>& values);

  void close();  // flushes; throws on failure (the destructor closes silently)

 private:
  void write(const std::string& name, const std::vector<std::uint64_t>& dims, std::int64_t type, const void* data);

  std::string path_;
  std::int64_t file_id_ = -1;
};

}  // namespace fanstore::datagen
