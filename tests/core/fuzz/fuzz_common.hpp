// Shared by the fuzz targets: a private scratch image directory and index checksum fix-ups, so that mutated
// indexes get past the checksums and reach the structural checks and the accessors behind them.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "fanstore/protocol/image_format.hpp"

namespace fanstore::fuzz {

// A directory of this process on tmpfs (or TMPDIR), made once and removed at exit.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    std::string t = std::string(base) + "/fanstore-fuzz-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) abort();
    return t;
  }();
  static const bool cleanup = [] {
    atexit([] {
      for (const char* n : {"index.fsi", "part-00000.fsp"}) unlink((ScratchDir() + "/" + n).c_str());
      rmdir(ScratchDir().c_str());
    });
    return true;
  }();
  (void)cleanup;
  return dir;
}

// Replaces `name` in the scratch directory with `data`.
inline void WriteScratch(const std::string& name, const uint8_t* data, size_t n) {
  const std::string path = ScratchDir() + "/" + name;
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) abort();
  for (size_t done = 0; done < n;) {
    ssize_t w = write(fd, data + done, n - done);
    if (w <= 0) abort();
    done += static_cast<size_t>(w);
  }
  close(fd);
}

// Recomputes both index checksums (and index_size) over a mutated index, as a crafted index would carry them.
inline void FixIndexChecksums(std::string& b) {
  using namespace format;
  if (b.size() < kHeaderSize) return;
  Store64(b.data() + hdr::kIndexSize, b.size());
  Store64(b.data() + hdr::kBodyXxh3, XXH3_64bits(b.data() + kHeaderSize, b.size() - kHeaderSize));
  Store64(b.data() + hdr::kHeaderXxh3, XXH3_64bits(b.data(), hdr::kHeaderXxh3));
}

}  // namespace fanstore::fuzz
