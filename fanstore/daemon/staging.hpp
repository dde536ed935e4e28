// Staging: copy this rank's partitions (+ the replicated one + the index) from the shared image to local
// storage, after checking the space, and verify every staged file's checksum.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fanstore/status.hpp"
#include "staged_files.hpp"

namespace fanstore::daemon {

struct StagePlan {
  std::vector<uint32_t> parts;  // partition ids this rank keeps (regular ones it holds + the replicated one)
  uint32_t regular_parts = 0;
  uint32_t replicated_part = 0xFFFFFFFFu;
  uint64_t bytes = 0;  // bytes to copy (partition files + index)
};

// Decides what `rank` of `nranks` keeps of the image at `image_dir` (see placement.hpp).
Result<StagePlan> PlanStaging(const std::string& image_dir, int rank, int nranks, int replicas);

// Creates `local_dir` if missing (with the image directory's permissions; `staged` learns whether it did) and takes
// an exclusive lock on it, held as long as the returned fd is open: a second `fanstore serve` on the same directory
// is refused (kExists, one line saying what to do) before it writes anything there. The image directory itself
// (by any path) is refused too: staging would copy each partition over itself, and --cleanup delete the image.
Result<int> LockLocal(const std::string& image_dir, const std::string& local_dir, StagedFiles* staged);

// Copies the plan's files into `local_dir` (which LockLocal made; files appear under their final name only
// when complete, and are recorded in `staged`), then verifies them. Refuses up front, naming the partition and the bytes needed, when
// statvfs says they will not fit while leaving `reserve_bytes` free. `progress` gets one human line now and
// then (may be empty); `cancelled` (may be empty) is asked every 64 MiB copied and every file verified, so a
// Ctrl-C during a long staging does not wait for it to finish.
Status Stage(const std::string& image_dir, const std::string& local_dir, const StagePlan& plan, uint64_t reserve_bytes,
             const std::function<void(const char* line)>& progress, const std::function<bool()>& cancelled,
             StagedFiles* staged);

}  // namespace fanstore::daemon
