// Checks made before mounting, so that the usual mistakes are reported as one clear line
// instead of libfuse's terse messages (or a hang on a stale mount).
#pragma once

#include <string>

#include "fanstore/status.hpp"

namespace fanstore::mount {

// OK when `device` (normally /dev/fuse) can be opened read-write; otherwise kUnsupported/kPermission
// with a line saying how to get FUSE.
Status CheckFuseDevice(const std::string& device);

// OK when `mountpoint` is an existing directory that is not itself a mount point and is empty
// (or `allow_nonempty`). kNotFound / kNotDirectory / kExists (busy or non-empty) / kIoError (stale mount).
Status CheckMountPoint(const std::string& mountpoint, bool allow_nonempty);

// True when the absolute, symlink-free `path` is the mount point of some mount (reads /proc/self/mountinfo).
bool IsMountPoint(const std::string& path);

}  // namespace fanstore::mount
