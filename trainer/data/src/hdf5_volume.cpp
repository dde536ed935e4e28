// HDF5 file access under one library-wide lock, with HDF5's own error stack turned into one-line DataErrors.
#include "trainer/data/hdf5_volume.hpp"

#include <hdf5.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <sstream>

#include "trainer/data/data_error.hpp"
#include "trainer/data/posix_file.hpp"

namespace fanstore::trainer::data {
namespace {

std::mutex& hdf5_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Runs under the lock: silences HDF5's default stack dump (it prints pages to stderr, per thread
// in a thread-safe build) so that the one-line DataError is the whole story.
void silence_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// The innermost (most specific) message of the current HDF5 error stack, e.g. "truncated file".
std::string last_hdf5_error() {
  std::string message;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* error, void* data) -> herr_t {
        auto* text = static_cast<std::string*>(data);
        if (text->empty() && error->desc != nullptr) *text = error->desc;
        return 0;
      },
      &message);
  H5Eclear2(H5E_DEFAULT);
  return message.empty() ? "unknown HDF5 error" : message;
}

// Closes an HDF5 identifier on scope exit (dataset, dataspace).
class ScopedId {
 public:
  ScopedId(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~ScopedId() {
    if (id_ >= 0) close_(id_);
  }
  ScopedId(const ScopedId&) = delete;
  ScopedId& operator=(const ScopedId&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

std::vector<std::uint64_t> dims_of(hid_t dataset) {
  ScopedId space(H5Dget_space(dataset), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return std::vector<std::uint64_t>(dims.begin(), dims.end());
}

}  // namespace

std::string Slab::to_string() const {
  std::ostringstream text;
  text << "[" << z0 << "," << z1 << ")x[" << y0 << "," << y1 << ")x[" << x0 << "," << x1 << ")";
  return text.str();
}

std::string shape_to_string(const std::vector<std::uint64_t>& dims) {
  std::ostringstream text;
  text << "(";
  for (std::size_t i = 0; i < dims.size(); ++i) text << (i ? ", " : "") << dims[i];
  text << (dims.size() == 1 ? ",)" : ")");
  return text.str();
}

Hdf5File::Hdf5File(std::string path) : path_(std::move(path)) {
  std::lock_guard lock(hdf5_mutex());
  silence_hdf5_errors();
  // No data sieving: HDF5 would read 64 KiB windows around every row of a hyperslab, so a rank whose
  // slab splits H or W would read (nearly) the whole sample. Without it each row run is one pread of
  // exactly the bytes the slab needs (the spatial I/O promise: ~1/k of a sample per rank of a k-way split).
  const hid_t access = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_sieve_buf_size(access, 0);
  const hid_t id = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, access);
  const std::string why = id < 0 ? last_hdf5_error() : std::string();  // before H5Pclose clears the error stack
  H5Pclose(access);
  if (id < 0) {
    // A file that cannot be opened at all (removed since the data was listed, its permissions changed) is said as
    // such, not taken for a damaged one.
    if (::access(path_.c_str(), R_OK) != 0) throw DataError(path_, std::string("cannot open: ") + std::strerror(errno));
    throw DataError(path_, "not a readable HDF5 file (" + why + ")");
  }
  file_id_ = id;
}

Hdf5File::~Hdf5File() {
  std::lock_guard lock(hdf5_mutex());
  H5Fclose(static_cast<hid_t>(file_id_));
}

std::vector<std::uint64_t> Hdf5File::dims(const std::string& name) const {
  std::lock_guard lock(hdf5_mutex());
  silence_hdf5_errors();
  if (H5Lexists(static_cast<hid_t>(file_id_), name.c_str(), H5P_DEFAULT) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw DataError(path_, "no dataset '" + name + "'");
  }
  ScopedId dataset(H5Dopen2(static_cast<hid_t>(file_id_), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) throw DataError(path_, "cannot open dataset '" + name + "' (" + last_hdf5_error() + ")");
  return dims_of(dataset.get());
}

void Hdf5File::read_float(const std::string& name, const std::vector<std::uint64_t>& start,
                          const std::vector<std::uint64_t>& count, float* out) const {
  read(name, start, count, H5T_NATIVE_FLOAT, out);
}

void Hdf5File::read_double(const std::string& name, const std::vector<std::uint64_t>& start,
                           const std::vector<std::uint64_t>& count, double* out) const {
  read(name, start, count, H5T_NATIVE_DOUBLE, out);
}

void Hdf5File::read(const std::string& name, const std::vector<std::uint64_t>& start,
                    const std::vector<std::uint64_t>& count, std::int64_t memory_type, void* out) const {
  std::lock_guard lock(hdf5_mutex());
  silence_hdf5_errors();
  if (H5Lexists(static_cast<hid_t>(file_id_), name.c_str(), H5P_DEFAULT) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw DataError(path_, "no dataset '" + name + "'");
  }
  ScopedId dataset(H5Dopen2(static_cast<hid_t>(file_id_), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) throw DataError(path_, "cannot open dataset '" + name + "' (" + last_hdf5_error() + ")");
  const auto dims = dims_of(dataset.get());
  if (dims.size() != start.size() || dims.size() != count.size()) {
    throw DataError(path_, "dataset '" + name + "' has rank " + std::to_string(dims.size()) + ", expected " +
                               std::to_string(start.size()));
  }
  for (std::size_t axis = 0; axis < dims.size(); ++axis) {
    if (start[axis] + count[axis] > dims[axis]) {
      throw DataError(path_, "hyperslab outside dataset '" + name + "' of shape " + shape_to_string(dims));
    }
  }
  const std::vector<hsize_t> file_start(start.begin(), start.end());
  const std::vector<hsize_t> file_count(count.begin(), count.end());
  ScopedId file_space(H5Dget_space(dataset.get()), H5Sclose);
  ScopedId memory_space(H5Screate_simple(static_cast<int>(file_count.size()), file_count.data(), nullptr), H5Sclose);
  if (!file_space.valid() || !memory_space.valid() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, file_start.data(), nullptr, file_count.data(), nullptr) <
          0) {
    throw DataError(path_, "cannot select hyperslab of '" + name + "' (" + last_hdf5_error() + ")");
  }
  if (H5Dread(dataset.get(), static_cast<hid_t>(memory_type), memory_space.get(), file_space.get(), H5P_DEFAULT, out) <
      0) {
    throw DataError(path_, "cannot read dataset '" + name + "' (" + last_hdf5_error() + ")");
  }
}

std::vector<std::string> list_hdf5_files(const std::string& directory) {
  std::vector<std::string> files;
  for (const auto& entry : list_directory(directory)) {
    if (entry.is_regular_file && has_suffix(entry.name, {".h5", ".hdf5"})) {
      files.push_back(join_path(directory, entry.name));
    }
  }
  if (files.empty()) throw DataError(directory, "no .h5/.hdf5 files");
  return files;
}

}  // namespace fanstore::trainer::data
