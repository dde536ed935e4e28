// Trust tokens for the index: "this exact file was fully checked, with this body checksum", so that processes
// started under `fanstore run` skip re-hashing a large index (docs/format.md, "How the index is trusted").
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace fanstore::index_trust {

// "fst2:<dev>:<ino>:<size>:<mtime ns>:<ctime ns>:<body xxh3 hex>" for the index file `st` describes.
std::string Make(const struct stat& st, uint64_t body_xxh3);

// True when `token` was made for this very file (same device, inode, size, mtime and ctime: any write,
// truncate or replacement changes the ctime at least) and names the checksum its header carries now.
bool Matches(const std::string& token, const struct stat& st, uint64_t body_xxh3);

}  // namespace fanstore::index_trust
