// Whole-file reads and directory listings with plain POSIX calls, so they work under FanStore's interposer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fanstore::trainer::data {

struct DirectoryEntry {
  std::string name;
  bool is_directory = false;
  bool is_regular_file = false;
};

// Reads the whole file (open, fstat, read, close); throws DataError naming the path on failure.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);

// Lists a directory (opendir/readdir, stat where d_type is unknown), without "." and "..",
// sorted by name so every rank sees the same order. Throws DataError if it cannot be opened.
std::vector<DirectoryEntry> list_directory(const std::string& path);

// "a" + "/" + "b" without doubling the slash.
std::string join_path(const std::string& directory, const std::string& name);

// Case-insensitive "does name end with one of these suffixes" (".jpg", ".JPEG", ...).
bool has_suffix(const std::string& name, const std::vector<std::string>& suffixes);

}  // namespace fanstore::trainer::data
