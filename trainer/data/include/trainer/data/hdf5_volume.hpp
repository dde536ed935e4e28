// Plain HDF5 access for volume readers: open a file, inspect a dataset's shape, read a hyperslab.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fanstore::trainer::data {

// A spatial box [z0,z1) x [y0,y1) x [x0,x1) of a D x H x W volume: what one spatial rank reads.
struct Slab {
  std::int64_t z0 = 0, z1 = 0;
  std::int64_t y0 = 0, y1 = 0;
  std::int64_t x0 = 0, x1 = 0;

  static Slab whole(std::int64_t depth, std::int64_t height, std::int64_t width) {
    return Slab{0, depth, 0, height, 0, width};
  }
  std::int64_t depth() const { return z1 - z0; }
  std::int64_t height() const { return y1 - y0; }
  std::int64_t width() const { return x1 - x0; }
  bool empty() const { return depth() <= 0 || height() <= 0 || width() <= 0; }
  bool fits_in(std::int64_t volume_depth, std::int64_t volume_height, std::int64_t volume_width) const {
    return z0 >= 0 && y0 >= 0 && x0 >= 0 && z1 <= volume_depth && y1 <= volume_height && x1 <= volume_width && !empty();
  }
  std::string to_string() const;
};

// An open read-only HDF5 file (H5Fopen through HDF5's default POSIX driver, so FanStore's
// interposer serves it). All HDF5 calls in this library go through one mutex: the Debian
// serial build is thread-safe only by a global lock anyway, and a non-thread-safe build needs it.
class Hdf5File {
 public:
  explicit Hdf5File(std::string path);  // throws DataError "<path>: not a readable HDF5 file (...)"
  ~Hdf5File();
  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;

  const std::string& path() const { return path_; }

  // Dimensions of dataset `name`; throws DataError if it does not exist.
  std::vector<std::uint64_t> dims(const std::string& name) const;

  // Reads the hyperslab start[i] .. start[i]+count[i] of dataset `name` (any numeric type,
  // converted by HDF5) into `out`, row-major, prod(count) values.
  void read_float(const std::string& name, const std::vector<std::uint64_t>& start,
                  const std::vector<std::uint64_t>& count, float* out) const;
  // Doubles hold every int32 and float exactly: labels are checked as stored, not as an integer conversion made them.
  void read_double(const std::string& name, const std::vector<std::uint64_t>& start,
                   const std::vector<std::uint64_t>& count, double* out) const;

 private:
  void read(const std::string& name, const std::vector<std::uint64_t>& start, const std::vector<std::uint64_t>& count,
            std::int64_t memory_type, void* out) const;

  std::string path_;
  std::int64_t file_id_ = -1;  // hid_t, kept out of the header so users need no HDF5 includes
};

// "(4, 32, 32)" for messages.
std::string shape_to_string(const std::vector<std::uint64_t>& dims);

// *.h5 / *.hdf5 files of a directory, sorted; throws DataError if the directory is missing or
// holds none.
std::vector<std::string> list_hdf5_files(const std::string& directory);

}  // namespace fanstore::trainer::data
