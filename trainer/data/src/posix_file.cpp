// Whole-file reads and sorted directory listings on plain POSIX calls (interposable by FanStore).
#include "trainer/data/posix_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "trainer/data/data_error.hpp"

namespace fanstore::trainer::data {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(path, "cannot open: " + errno_text(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError(path, "cannot stat: " + errno_text(err));
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(info.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      throw DataError(path, "read failed: " + errno_text(err));
    }
    if (got == 0) break;  // the file shrank under us; decode what is there and let it fail loudly
    done += static_cast<std::size_t>(got);
  }
  bytes.resize(done);
  ::close(fd);
  return bytes;
}

std::vector<DirectoryEntry> list_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) throw DataError(path, "cannot open directory: " + errno_text(errno));
  std::vector<DirectoryEntry> entries;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    DirectoryEntry item{name, entry->d_type == DT_DIR, entry->d_type == DT_REG};
    // Some file systems (and some interposers) report DT_UNKNOWN; stat then follows symlinks too.
    if (entry->d_type == DT_UNKNOWN || entry->d_type == DT_LNK) {
      struct stat info {};
      if (::stat(join_path(path, name).c_str(), &info) == 0) {
        item.is_directory = S_ISDIR(info.st_mode);
        item.is_regular_file = S_ISREG(info.st_mode);
      }
    }
    entries.push_back(std::move(item));
  }
  ::closedir(dir);
  std::sort(entries.begin(), entries.end(),
            [](const DirectoryEntry& a, const DirectoryEntry& b) { return a.name < b.name; });
  return entries;
}

std::string join_path(const std::string& directory, const std::string& name) {
  if (directory.empty()) return name;
  if (directory.back() == '/') return directory + name;
  return directory + "/" + name;
}

bool has_suffix(const std::string& name, const std::vector<std::string>& suffixes) {
  for (const auto& suffix : suffixes) {
    if (name.size() < suffix.size()) continue;
    const bool same = std::equal(
        suffix.begin(), suffix.end(), name.end() - static_cast<std::ptrdiff_t>(suffix.size()), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        });
    if (same) return true;
  }
  return false;
}

}  // namespace fanstore::trainer::data
