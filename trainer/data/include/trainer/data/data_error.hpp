// The one error type of the data readers: a single line that names the offending file or directory.
#pragma once

#include <stdexcept>
#include <string>

namespace fanstore::trainer::data {

// Thrown for anything wrong with the input (missing directory, corrupt JPEG/HDF5, wrong shapes).
// what() is one line of the form "<path>: <what is wrong>", so a training log points at the file.
class DataError : public std::runtime_error {
 public:
  DataError(const std::string& path, const std::string& problem)
      : std::runtime_error(path + ": " + problem), path_(path) {}

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fanstore::trainer::data
