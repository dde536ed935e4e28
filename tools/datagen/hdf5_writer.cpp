// HDF5 dataset writing with object timestamps off, so the same seed gives the same file bytes.
#include "hdf5_writer.hpp"

#include <hdf5.h>

#include <mutex>
#include <stdexcept>

namespace fanstore::datagen {
namespace {

// One lock for all HDF5 calls: generator threads share the library, which is only safe by a
// global lock even in thread-safe builds (and not at all in the others).
std::mutex& hdf5_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

Hdf5Writer::Hdf5Writer(const std::string& path) : path_(path) {
  std::lock_guard lock(hdf5_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t creation = H5Pcreate(H5P_FILE_CREATE);
  H5Pset_obj_track_times(creation, false);  // the root group's header would carry a timestamp
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, creation, H5P_DEFAULT);
  H5Pclose(creation);
  if (id < 0) throw std::runtime_error(path + ": cannot create HDF5 file");
  file_id_ = id;
}

Hdf5Writer::~Hdf5Writer() {
  if (file_id_ < 0) return;
  std::lock_guard lock(hdf5_mutex());
  H5Fclose(static_cast<hid_t>(file_id_));
}

void Hdf5Writer::write_float32(const std::string& name, const std::vector<std::uint64_t>& dims,
                               const std::vector<float>& values) {
  write(name, dims, H5T_NATIVE_FLOAT, values.data());
}

void Hdf5Writer::write_uint8(const std::string& name, const std::vector<std::uint64_t>& dims,
                             const std::vector<std::uint8_t>& values) {
  write(name, dims, H5T_NATIVE_UINT8, values.data());
}

void Hdf5Writer::write(const std::string& name, const std::vector<std::uint64_t>& dims, std::int64_t type,
                       const void* data) {
  std::lock_guard lock(hdf5_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::vector<hsize_t> extent(dims.begin(), dims.end());
  const hid_t space = H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr);
  const hid_t creation = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_obj_track_times(creation, false);
  // Stored little-endian IEEE / unsigned 8-bit whatever the host, like h5py on x86.
  const hid_t file_type = type == H5T_NATIVE_FLOAT ? H5T_IEEE_F32LE : H5T_STD_U8LE;
  const hid_t dataset =
      H5Dcreate2(static_cast<hid_t>(file_id_), name.c_str(), file_type, space, H5P_DEFAULT, creation, H5P_DEFAULT);
  const bool ok = dataset >= 0 && H5Dwrite(dataset, static_cast<hid_t>(type), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
  if (dataset >= 0) H5Dclose(dataset);
  H5Pclose(creation);
  H5Sclose(space);
  if (!ok) throw std::runtime_error(path_ + ": cannot write dataset '" + name + "'");
}

void Hdf5Writer::close() {
  std::lock_guard lock(hdf5_mutex());
  const hid_t id = static_cast<hid_t>(file_id_);
  file_id_ = -1;
  if (id >= 0 && H5Fclose(id) < 0) throw std::runtime_error(path_ + ": cannot close HDF5 file");
}

}  // namespace fanstore::datagen
