// The path-based operations fanstore-iobench times (stat, open+close, whole-file read, readdir, sequential read).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fanstore::bench {

enum class IoOp { kStat, kOpenClose, kRead, kReaddir, kSeqRead };

// "stat", "open", "read", "readdir", "seqread" -> IoOp; false for anything else.
bool ParseIoOp(const std::string& name, IoOp& op);

// Runs `op` once on `path`. Returns what it touched (bytes for read/seqread, entries for readdir, 0 otherwise),
// or -1 with errno set. `buffer` is the read buffer; its size is the read(2) size.
int64_t RunIoOp(IoOp op, const std::string& path, std::vector<char>& buffer);

}  // namespace fanstore::bench
