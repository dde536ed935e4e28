// Reads byte ranges of the partitions staged on this node (for peers' requests, and for local clients whose view
// is older than ours). The files are opened once; every read is bounds-checked and a short read (a staged copy
// deleted or truncated under us) is an error, never a fault.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fanstore/image.hpp"
#include "fanstore/status.hpp"

namespace fanstore::daemon {

class StagedReader {
 public:
  // Opens every partition `img` has here (Image::HasPartition, i.e. staged under its partition_dir).
  explicit StagedReader(const Image& img);
  ~StagedReader();
  StagedReader(const StagedReader&) = delete;
  StagedReader& operator=(const StagedReader&) = delete;

  bool Has(uint32_t part) const { return part < fds_.size() && fds_[part] >= 0; }
  // kInvalidArgument when [offset, offset + n) is not inside the staged file; kIoError when it cannot be read
  // (or a read comes back short) or the partition is not staged here.
  Status Check(uint32_t part, uint64_t offset, uint64_t n) const;
  Status Read(uint32_t part, uint64_t offset, uint64_t n, char* dst) const;

 private:
  std::vector<int> fds_;         // by partition id; -1: not staged here
  std::vector<uint64_t> sizes_;  // file size when opened
  std::vector<std::string> names_;
};

}  // namespace fanstore::daemon
