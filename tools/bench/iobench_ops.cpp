// Each op is a plain libc call sequence, exactly what an unmodified program issues, so the interposer sees it.
#include "iobench_ops.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "bench_util.hpp"

namespace fanstore::bench {

bool ParseIoOp(const std::string& name, IoOp& op) {
  if (name == "stat") op = IoOp::kStat;
  else if (name == "open") op = IoOp::kOpenClose;
  else if (name == "read") op = IoOp::kRead;
  else if (name == "readdir") op = IoOp::kReaddir;
  else if (name == "seqread") op = IoOp::kSeqRead;
  else return false;
  return true;
}

namespace {

int64_t ListDirectory(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (!d) return -1;
  int64_t entries = 0;
  errno = 0;
  while (readdir(d) != nullptr) ++entries;
  int err = errno;
  closedir(d);
  if (err != 0) {
    errno = err;
    return -1;
  }
  return entries;
}

}  // namespace

int64_t RunIoOp(IoOp op, const std::string& path, std::vector<char>& buffer) {
  switch (op) {
    case IoOp::kStat: {
      struct stat st {};
      return stat(path.c_str(), &st) == 0 ? 0 : -1;
    }
    case IoOp::kOpenClose: {
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return -1;
      close(fd);
      return 0;
    }
    case IoOp::kRead:
    case IoOp::kSeqRead:
      // Same call sequence; they differ only in the file size and the buffer size the script passes.
      return ReadWholeFile(path, buffer);
    case IoOp::kReaddir: return ListDirectory(path);
  }
  errno = EINVAL;
  return -1;
}

}  // namespace fanstore::bench
