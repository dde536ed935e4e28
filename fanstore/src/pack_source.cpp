// The directory source of pack: each file opened once and read front to back with read(2).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "fanstore/status.hpp"
#include "pack_tree.hpp"

namespace fanstore {
namespace {

class FileStream final : public SourceStream {
 public:
  FileStream(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FileStream() override { ::close(fd_); }
  Result<size_t> Read(char* buf, size_t n) override {
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::read(fd_, buf + got, n - got);
      if (r < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "cannot read " + Printable(path_));
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

 private:
  int fd_;
  std::string path_;
};

class DirectorySource final : public PackSource {
 public:
  explicit DirectorySource(std::string root) : root_(std::move(root)) {}
  Result<std::unique_ptr<SourceStream>> Open(const PackTree& tree, uint32_t id) override {
    std::string path = Path(tree, id);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "cannot open " + Printable(path));
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return std::unique_ptr<SourceStream>(new FileStream(fd, std::move(path)));
  }
  std::string Describe(const PackTree& tree, uint32_t id) const override { return Printable(Path(tree, id)); }

 private:
  std::string Path(const PackTree& tree, uint32_t id) const {
    return root_ + "/" + std::string(tree.Path(tree.nodes[id]));
  }

  std::string root_;
};

}  // namespace

std::unique_ptr<PackSource> NewDirectorySource(const std::string& root) {
  return std::make_unique<DirectorySource>(root);
}

}  // namespace fanstore
