// Stored bytes on their way to a client: inline in memory, or in a memfd (big files) that the socket
// server passes to the client with SCM_RIGHTS. Move-only; owns the memfd.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>

namespace fanstore::daemon {

struct Payload {
  std::string bytes;    // used when memfd < 0
  int memfd = -1;       // else: `size` bytes at `offset` of this memfd
  uint64_t offset = 0;
  uint64_t size = 0;

  Payload() = default;
  Payload(const Payload&) = delete;
  Payload& operator=(const Payload&) = delete;
  Payload(Payload&& o) noexcept { *this = std::move(o); }
  Payload& operator=(Payload&& o) noexcept {
    if (this != &o) {
      Reset();
      bytes = std::move(o.bytes);
      memfd = std::exchange(o.memfd, -1);
      offset = o.offset;
      size = o.size;
    }
    return *this;
  }
  ~Payload() { Reset(); }
  void Reset() {
    if (memfd >= 0) close(memfd);
    memfd = -1;
  }
  uint64_t length() const { return memfd >= 0 ? size : bytes.size(); }
};

}  // namespace fanstore::daemon
