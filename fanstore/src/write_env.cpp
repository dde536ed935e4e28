// POSIX implementation of WriteEnv: retries short writes and EINTR, reports errno with the path.
#include "write_env.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace fanstore {
namespace {

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path, const WriteSyscalls* calls)
      : fd_(fd), path_(std::move(path)), calls_(calls) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = calls_->write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "write " + Printable(path_));
      }
      if (w == 0) return Status::FromErrno(ENOSPC, "write " + Printable(path_));  // no progress: treat as full
      p += w;
      n -= static_cast<size_t>(w);
      size_ += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }

  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = calls_->pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "write " + Printable(path_));
      }
      if (w == 0) return Status::FromErrno(ENOSPC, "write " + Printable(path_));
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      return Status::FromErrno(errno, "truncate " + Printable(path_));
    if (::lseek(fd_, static_cast<off_t>(size), SEEK_SET) < 0)
      return Status::FromErrno(errno, "seek " + Printable(path_));
    size_ = size;
    return Status::Ok();
  }

  Status Sync() override {
    if (::fsync(fd_) != 0) return Status::FromErrno(errno, "fsync " + Printable(path_));
    return Status::Ok();
  }

  Status Close() override {
    if (fd_ < 0) return Status::Ok();
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return Status::FromErrno(errno, "close " + Printable(path_));
    return Status::Ok();
  }

  uint64_t Size() const override { return size_; }

 private:
  int fd_;
  std::string path_;
  const WriteSyscalls* calls_;
  uint64_t size_ = 0;
};

class PosixWriteEnv final : public WriteEnv {
 public:
  explicit PosixWriteEnv(WriteSyscalls calls) : calls_(std::move(calls)) {
    if (!calls_.write) calls_.write = [](int fd, const void* b, size_t n) { return ::write(fd, b, n); };
    if (!calls_.pwrite) calls_.pwrite = [](int fd, const void* b, size_t n, off_t o) { return ::pwrite(fd, b, n, o); };
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno(errno, "create " + Printable(path));
    return std::unique_ptr<WritableFile>(new PosixWritableFile(fd, path, &calls_));
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return Status::FromErrno(errno, "mkdir " + Printable(path));
    return Status::Ok();
  }

  Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open " + Printable(path));
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return Status::FromErrno(err, "fsync " + Printable(path));
    return Status::Ok();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return Status::FromErrno(errno, "rename " + Printable(from) + " to " + Printable(to));
    return Status::Ok();
  }

  void RemoveDirAndFiles(const std::string& path) override {
    if (DIR* d = ::opendir(path.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        ::unlink((path + "/" + name).c_str());
      }
      ::closedir(d);
    }
    ::rmdir(path.c_str());
  }

 private:
  WriteSyscalls calls_;
};

}  // namespace

WriteEnv* DefaultWriteEnv() {
  static WriteEnv* env = new PosixWriteEnv(WriteSyscalls{});
  return env;
}

std::unique_ptr<WriteEnv> NewPosixWriteEnv(WriteSyscalls calls) {
  return std::make_unique<PosixWriteEnv>(std::move(calls));
}

}  // namespace fanstore
