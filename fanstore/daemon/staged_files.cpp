// StagedFiles: a registry of what staging created, checked by device and inode before anything is removed.
#include "staged_files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace fanstore::daemon {

Status WriteFullAt(int fd, const char* data, uint64_t n, uint64_t offset, const std::string& what) {
  while (n > 0) {
    ssize_t w = pwrite(fd, data, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Status::FromErrno(errno, what);
    data += w;
    offset += static_cast<uint64_t>(w);
    n -= static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

void StagedFiles::SetDirectory(const std::string& dir, bool created) {
  std::lock_guard<std::mutex> g(mu_);
  dir_ = dir;
  created_ = created;
}

void StagedFiles::BeginTemp(const std::string& path) {
  std::lock_guard<std::mutex> g(mu_);
  temps_.push_back(path);
}

void StagedFiles::AbortTemp(const std::string& tmp) {
  std::lock_guard<std::mutex> g(mu_);
  unlink(tmp.c_str());
  temps_.erase(std::remove(temps_.begin(), temps_.end(), tmp), temps_.end());
}

Status StagedFiles::Commit(const std::string& tmp, const std::string& final_path) {
  std::lock_guard<std::mutex> g(mu_);
  temps_.erase(std::remove(temps_.begin(), temps_.end(), tmp), temps_.end());
  if (removed_) {
    unlink(tmp.c_str());
    return Status(Code::kIoError, "staging stopped (the daemon is exiting)");
  }
  struct stat st;
  if (lstat(tmp.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + tmp);
  if (rename(tmp.c_str(), final_path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return Status::FromErrno(err, "rename " + tmp + " -> " + final_path);
  }
  files_.push_back({final_path, st.st_dev, st.st_ino});
  return Status::Ok();
}

void StagedFiles::RemoveAll() {
  std::lock_guard<std::mutex> g(mu_);
  removed_ = true;
  for (const std::string& t : temps_) unlink(t.c_str());
  temps_.clear();
  for (const File& f : files_) {
    struct stat st;
    if (lstat(f.path.c_str(), &st) == 0 && st.st_dev == f.dev && st.st_ino == f.ino) unlink(f.path.c_str());
  }
  files_.clear();
  if (created_ && !dir_.empty()) rmdir(dir_.c_str());  // only succeeds when empty
  created_ = false;
}

}  // namespace fanstore::daemon
