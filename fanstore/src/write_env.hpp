// The OS writes of `pack` behind a small interface, so tests can inject ENOSPC and short writes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fanstore/status.hpp"

namespace fanstore {

// A file being written sequentially; WriteAt/Truncate exist for patching headers and undoing a
// compressed attempt that did not pay. Every method reports the OS error with the file's name.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(const void* data, size_t n) = 0;
  virtual Status WriteAt(uint64_t offset, const void* data, size_t n) = 0;
  virtual Status Truncate(uint64_t size) = 0;  // also moves the append position to `size`
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  virtual uint64_t Size() const = 0;  // bytes appended so far == the append position
};

// Directory operations and the file factory pack needs. The default talks to the OS.
class WriteEnv {
 public:
  virtual ~WriteEnv() = default;
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  virtual Status CreateDir(const std::string& path) = 0;
  virtual Status SyncDir(const std::string& path) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Removes a directory and the files in it (one level: images are flat). Best effort.
  virtual void RemoveDirAndFiles(const std::string& path) = 0;
};

// The raw write calls the POSIX env makes; tests replace them to simulate short writes and ENOSPC.
struct WriteSyscalls {
  std::function<ssize_t(int fd, const void* buf, size_t n)> write;
  std::function<ssize_t(int fd, const void* buf, size_t n, off_t off)> pwrite;
};

// The process-wide POSIX env (never freed).
WriteEnv* DefaultWriteEnv();
// A POSIX env whose write/pwrite go through `calls` (missing members use the real calls).
std::unique_ptr<WriteEnv> NewPosixWriteEnv(WriteSyscalls calls);

}  // namespace fanstore
