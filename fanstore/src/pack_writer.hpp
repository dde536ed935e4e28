// The parallel middle of pack: workers read and compress chunks, one writer appends them to the partitions.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "fanstore/pack.hpp"
#include "pack_tree.hpp"

namespace fanstore {

// Writes the files `tasks` (ids of `tree`, in partition order) into `files` (one per partition, positioned
// after its header), chunk by chunk, and fills each node's offset/stored_size/codec/checksum/chunk_first and
// tree->chunks. The bytes written depend only on the tree and `level`/`chunk_shift`, never on thread timing.
// A file whose size differs from what the walk saw fails the pack naming it; `stop` set fails it at the next chunk.
Status WriteChunks(const std::vector<uint32_t>& tasks, PackTree* tree, PackSource* source, int level,
                   uint32_t chunk_shift, int threads, std::vector<std::unique_ptr<WritableFile>>* files,
                   const std::function<void(const PackProgress&)>& progress, const std::atomic<bool>* stop);

}  // namespace fanstore
