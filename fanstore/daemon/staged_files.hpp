// What this daemon put on the node (the files it staged, the --local directory if it made it), so that --cleanup
// removes exactly that: never a user's file that merely has a staged file's name (a failed staging removes nothing
// it did not write), never a directory it was given (LockLocal refuses the image directory itself). Thread-safe: the
// start-up signal watcher may remove everything while the main thread is stuck in a start-up collective.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore::daemon {

// pwrite until all `n` bytes are at `offset` (EINTR retried), or an errno error saying `what`.
Status WriteFullAt(int fd, const char* data, uint64_t n, uint64_t offset, const std::string& what);

class StagedFiles {
 public:
  // The --local directory, and whether this process created it (only then may --cleanup remove it).
  void SetDirectory(const std::string& dir, bool created);
  // A temporary copy being written at `path`: removed by RemoveAll should the process stop before Commit.
  void BeginTemp(const std::string& path);
  // Renames the finished temporary copy to `final_path` and records the file (its device and inode), or removes
  // it if RemoveAll already ran (the process is on its way out). The rename happens under the lock, so a copy
  // can never appear under its final name after RemoveAll.
  Status Commit(const std::string& tmp, const std::string& final_path);
  // Forgets a temporary copy that failed (and removes it).
  void AbortTemp(const std::string& tmp);
  // Removes each recorded file that its path still names (a file replaced by someone else since is left
  // alone), temporary copies in progress, then the directory if this process created it and it is empty.
  // Later commits are refused. Idempotent.
  void RemoveAll();

 private:
  struct File {
    std::string path;
    dev_t dev;
    ino_t ino;
  };
  std::mutex mu_;
  std::string dir_;
  bool created_ = false;
  bool removed_ = false;
  std::vector<File> files_;
  std::vector<std::string> temps_;
};

}  // namespace fanstore::daemon
