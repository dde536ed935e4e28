// ImageDirReader: pread of the image directory's partition files, paced by a virtual clock at the cap.
#include "image_dir_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "fanstore/protocol/payload_memfd.hpp"

namespace fanstore::daemon {

using daemon_proto::NowUs;

ImageDirReader::ImageDirReader(std::vector<std::string> paths, uint64_t bytes_per_s)
    : paths_(std::move(paths)), fds_(paths_.size(), -1), rate_(bytes_per_s) {}

ImageDirReader::~ImageDirReader() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

int64_t ImageDirReader::Book(uint64_t n) {
  if (rate_ == 0) return 0;
  std::lock_guard<std::mutex> g(mu_);
  // A budget unused for a while is not saved up beyond a tenth of a second's worth.
  const int64_t start = std::max(next_free_us_, NowUs() - 100000);
  next_free_us_ = start + SlotUs(n);
  return start;
}

void ImageDirReader::Unbook(uint64_t n) {
  if (rate_ == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  next_free_us_ -= SlotUs(n);
}

Status ReadFullAt(int fd, char* dst, uint64_t n, uint64_t offset, const std::string& name, const char* why_short) {
  while (n > 0) {
    const ssize_t r = pread(fd, dst, n > (1u << 30) ? (1u << 30) : n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno(errno, "read " + name);
    if (r == 0) return Status(Code::kIoError, name + " ends at byte " + std::to_string(offset) + ": " + why_short);
    dst += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Status ImageDirReader::Read(uint32_t part, uint64_t offset, uint64_t n, char* dst, std::atomic<uint64_t>* counted) {
  if (part >= paths_.size()) return Status(Code::kInvalidArgument, "no partition " + std::to_string(part));
  int fd;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (fds_[part] < 0) {
      fds_[part] = open(paths_[part].c_str(), O_RDONLY | O_CLOEXEC);
      if (fds_[part] < 0) return Status::FromErrno(errno, "open " + paths_[part]);
      // No read-ahead: each piece is read whole by one rank, and the next one by another, so whatever the kernel
      // read past a piece's end would be read from the shared file system for nothing.
      posix_fadvise(fds_[part], 0, 0, POSIX_FADV_RANDOM);
    }
    fd = fds_[part];
  }
  Status s = ReadFullAt(fd, dst, n, offset, paths_[part], "the image is truncated (copy the image again or re-pack)");
  if (s.ok()) counted->fetch_add(n, std::memory_order_relaxed);
  return s;
}

Status ImageDirReader::ReadForStaging(uint32_t part, uint64_t offset, uint64_t n, char* dst,
                                      const std::function<bool()>& cancelled, bool at_once, bool* interrupted) {
  // Paced before the read: the bytes go once the budget has room for them.
  const int64_t due = Book(n);
  for (int64_t now; !at_once && (now = NowUs()) < due;) {
    if (cancelled && cancelled()) {
      Unbook(n);
      if (interrupted) *interrupted = true;
      return Status(Code::kIoError, "staging interrupted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min<int64_t>(due - now, 20000)));
  }
  return Read(part, offset, n, dst, &staging_bytes_);
}

Status ImageDirReader::ReadNow(uint32_t part, uint64_t offset, uint64_t n, char* dst) {
  Book(n);
  return Read(part, offset, n, dst, &reader_bytes_);
}

}  // namespace fanstore::daemon
