// Shared test helpers: scratch directories, running fanstore-datagen, byte comparisons.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fanstore::trainer::data::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Runs fanstore-datagen with `arguments` (already shell-quoted where needed); fails the test on a
// non-zero exit.
void run_datagen(const std::string& arguments);

// Relative path -> contents of every regular file under `root`.
std::map<std::string, std::vector<std::uint8_t>> read_tree(const std::string& root);

std::vector<std::uint8_t> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes);

// Runs a shell command, returns its exit status.
int run_command(const std::string& command);

}  // namespace fanstore::trainer::data::testing
