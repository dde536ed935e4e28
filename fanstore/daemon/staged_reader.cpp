// StagedReader: pread over the staged partition files, with the size checks that keep a bad request or a
// damaged staged copy an error reply.
#include "staged_reader.hpp"
#include "range_check.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace fanstore::daemon {

StagedReader::StagedReader(const Image& img) {
  uint32_t n = img.PartitionCount();
  fds_.assign(n, -1);
  sizes_.assign(n, 0);
  names_.resize(n);
  for (uint32_t p = 0; p < n; ++p) {
    if (!img.HasPartition(p)) continue;
    names_[p] = img.PartitionPath(p);
    int fd = open(names_[p].c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) continue;
    if (fstat(fd, &st) != 0) {
      close(fd);
      continue;
    }
    fds_[p] = fd;
    sizes_[p] = static_cast<uint64_t>(st.st_size);
  }
}

StagedReader::~StagedReader() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

Status StagedReader::Check(uint32_t part, uint64_t offset, uint64_t n) const {
  if (!Has(part)) return Status(Code::kIoError, "partition " + std::to_string(part) + " is not staged on this rank");
  if (!RangeWithin(offset, n, sizes_[part]))
    return Status(Code::kInvalidArgument, "bytes " + std::to_string(offset) + "+" + std::to_string(n) +
                                              " are outside " + names_[part] + " (" + std::to_string(sizes_[part]) +
                                              " bytes)");
  return Status::Ok();
}

Status StagedReader::Read(uint32_t part, uint64_t offset, uint64_t n, char* dst) const {
  Status s = Check(part, offset, n);
  if (!s.ok()) return s;
  while (n > 0) {
    ssize_t r = pread(fds_[part], dst, n > (1u << 30) ? (1u << 30) : n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno(errno, "read " + names_[part]);
    if (r == 0)
      return Status(Code::kIoError, names_[part] + " is shorter than when staged (" + std::to_string(offset) +
                                        " bytes): was the staged copy truncated?");
    dst += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

}  // namespace fanstore::daemon
