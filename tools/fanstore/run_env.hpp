// What `fanstore run` sets up for its children besides LD_PRELOAD: the index trust token and the node chunk cache.
#pragma once

#include <string>

#include "fanstore/image.hpp"

namespace fanstore::cli {

// Why FANSTORE_CACHE_BYTES or FANSTORE_NODE_CACHE_BYTES cannot be used, or empty: checked before anything starts,
// so a typo is one line from `fanstore run` rather than EIO on every path in the program.
std::string CheckRunVariables();

// After `img` was opened (and so fully checked) here: exports FANSTORE_INDEX_TRUST, so children skip re-hashing
// the index, and joins the node-wide decoded-chunk cache (FANSTORE_NODE_CACHE: where, default /dev/shm, "off"
// disables it; FANSTORE_NODE_CACHE_BYTES: budget), exporting FANSTORE_NODE_CACHE_DIR. A node chunk cache that cannot
// be had is one warning line, not a failure: the children then decode per process. With `copy_index`, the cache
// also gets the copy of the index the children map (KeepIndexCopy; not through a daemon, whose index is its own
// staged copy already).
void PrepareRunEnvironment(const Image& img, bool copy_index);

}  // namespace fanstore::cli
