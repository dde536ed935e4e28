// Public entry of the FUSE front end: mount an image read-only at a directory and serve it until unmounted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore::mount {

struct MountOptions {
  std::string image;                      // image directory (index + partitions); ignored with daemon_socket
  std::string mountpoint;                 // existing, empty directory (unless "nonempty" is in fuse_options)
  bool foreground = false;                // false: detach once the mount is in place
  std::string daemon_socket;              // multi-node: this node's `fanstore serve` socket (it names the index)
  std::vector<std::string> fuse_options;  // -o items, already split at ','
  int threads = 0;                        // most worker threads of the session loop; 0 = libfuse's default
  uint64_t cache_bytes = 64ull << 20;     // decoded-chunk cache budget of the client
  // Checked (opened and closed) before mounting so a missing FUSE is one clear line. libfuse itself
  // always opens /dev/fuse; tests point this elsewhere to simulate a machine without FUSE.
  std::string fuse_device = "/dev/fuse";
  std::string command = "fanstore mount";  // names the command in warning lines (`fanstore run` mounts too)
};

// Mounts `opts.image` read-only at `opts.mountpoint` and serves it until it is unmounted
// (fusermount3 -u, umount) or the serving process gets SIGINT/SIGTERM/SIGHUP.
// On success in the background, the calling process returns OK as soon as the mount is in place and
// a detached child keeps serving; in the foreground it returns OK after the clean unmount.
// On failure before the mount is in place (no FUSE, bad mount point, busy, bad image, options),
// returns a status whose message is one actionable line; nothing stays mounted.
Status Mount(const MountOptions& opts);

}  // namespace fanstore::mount
