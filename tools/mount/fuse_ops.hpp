// The low-level FUSE operations over fanstore::Client (internal to fanstore_fuse).
#pragma once

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif
#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "fanstore/client.hpp"

namespace fanstore::mount {

// Shared by every request; set up once before the session starts and read-only afterwards.
struct FsContext {
  Client* client = nullptr;
  // The image never changes while mounted, so the kernel may keep names, attributes and
  // negative lookups for as long as it likes; a day is "forever" without overflow worries.
  double entry_timeout = 86400.0;
  double attr_timeout = 86400.0;
  double negative_timeout = 86400.0;
  uint32_t max_io = 1u << 20;  // largest read the kernel may send (sets max_pages through max_write)
  bool readdirplus = true;     // answer readdir with attributes so `ls -l`/os.scandir+stat skip lookups
  struct fuse_conn_info_opts* conn_opts = nullptr;  // user -o conn options (readdirplus=..., ...), may be null
  // statfs numbers, computed once from the image summary.
  uint64_t total_bytes = 0;
  uint64_t total_entries = 0;
};

// Nodeids are image ids + 1 so that the image root (id 0) is FUSE_ROOT_ID (1) and every lookup is O(1).
// st_ino (what programs see) is the image's stable inode from Client::FillStat, not the nodeid.
inline fuse_ino_t NodeId(uint32_t id) { return static_cast<fuse_ino_t>(id) + 1; }
inline uint32_t ImageId(fuse_ino_t node) { return static_cast<uint32_t>(node - 1); }

// The operation table; userdata passed to fuse_session_new must be a FsContext*.
const struct fuse_lowlevel_ops& LowLevelOps();

}  // namespace fanstore::mount
