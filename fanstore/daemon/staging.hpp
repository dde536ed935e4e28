// Staging's set-up: what this rank keeps of the image, the lock on its --local directory, the space check, the
// index copy and the files the partitions are staged into (the Stager fills them: stager.hpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fanstore/status.hpp"
#include "stage_layout.hpp"
#include "staged_files.hpp"
#include "staged_reader.hpp"
#include "stager.hpp"

namespace fanstore::daemon {

struct StagePlan {
  std::vector<uint32_t> parts;  // partition ids this rank keeps (regular ones it holds + the replicated one)
  uint32_t regular_parts = 0;
  uint32_t replicated_part = kNoPartition;
  std::vector<uint64_t> sizes;       // their file sizes
  std::vector<mode_t> modes;         // and permission bits (each copy gets its source's)
  std::vector<std::string> sources;  // every partition's file in the image directory, by partition id
  uint64_t index_bytes = 0;
  uint64_t bytes = 0;        // bytes to copy (partition files + index)
  uint64_t content_key = 0;  // Image::ContentKey of the index: every rank must serve the same image
};

// Decides what `rank` of `nranks` keeps of the image at `image_dir` (see placement.hpp).
Result<StagePlan> PlanStaging(const std::string& image_dir, int rank, int nranks, int replicas);

// Creates `local_dir` if missing (with the image directory's permissions; `staged` learns whether it did) and takes
// an exclusive lock on it, held as long as the returned fd is open: a second `fanstore serve` on the same directory
// is refused (kExists, one line saying what to do) before it writes anything there. The image directory itself
// (by any path) is refused too: staging would copy each partition over itself, and --cleanup delete the image.
// A directory holding an image's index without kStagedMarker (another image, not a staged copy) is refused too, and
// the marker is written (recorded in `staged`, so --cleanup removes it). Under the lock, the temporary files of
// runs that died (`NAME.tmp.PID`) are removed.
Result<int> LockLocal(const std::string& image_dir, const std::string& local_dir, StagedFiles* staged);

// Written into --local by every daemon that stages there.
inline constexpr const char* kStagedMarker = ".fanstore-staged";

// Refuses up front, naming the partition and the bytes needed, when statvfs says the plan's files will not fit
// in `local_dir` (locked by LockLocal) while leaving `reserve_bytes` free.
Status CheckSpace(const std::string& local_dir, const StagePlan& plan, uint64_t reserve_bytes);

// Copies the image's index into `local_dir` (which LockLocal made; the copy appears under its final name only
// when complete, and is recorded in `staged`).
Status StageIndex(const std::string& image_dir, const std::string& local_dir, StagedFiles* staged);

// Creates each planned partition's temporary file where `index` (the staged index, opened with the staging directory
// as its partition directory) places it, recorded in `staged`, with its source's permission bits and its space
// allocated; cuts it into pieces of about `piece_bytes` and hands it to `reader` (StagedReader::Begin).
Result<std::vector<StagedPart>> PrepareParts(const Image& index, const StagePlan& plan, uint64_t piece_bytes,
                                             StagedFiles* staged, StagedReader* reader);

}  // namespace fanstore::daemon
