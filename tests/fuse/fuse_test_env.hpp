// The shared fixture of the FUSE tests: one packed image, mounted once in the foreground for the whole run.
#pragma once

#include <sys/types.h>

#include <string>

namespace fanstore::fusetest {

struct MountedImage {
  std::string root;   // temp directory holding everything below
  std::string src;    // the generated source tree
  std::string image;  // the packed image (bad.bin corrupted after packing)
  std::string mnt;    // where it is mounted
  pid_t server = -1;  // `fanstore mount -f` serving it
};

// Valid while the tests run (set up by fuse_test_main.cpp).
const MountedImage& Env();

}  // namespace fanstore::fusetest
