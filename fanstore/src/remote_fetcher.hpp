// What the client asks of another node for partitions that are not on this one: the interface between the client
// (client_core.cpp) and the daemon fetcher (daemon_client.cpp), and what the tests' fakes implement. Private: the
// public headers only name it (fanstore/client.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "fanstore/image.hpp"
#include "fanstore/status.hpp"

namespace fanstore {

class RemoteFetcher {
 public:
  virtual ~RemoteFetcher() = default;
  // Whether what it fetches is kept node-wide already (the daemon's fetch cache, which every client process of the
  // node reads): the client then does not copy whole raw chunks into its own node chunk cache a second time.
  virtual bool CachesNodeWide() { return false; }
  // Calls `use` once with the stored bytes [offset, offset + length) of partition `part`, valid only during the
  // call (the daemon fetcher passes a view of its shared reply area: no copy; the client decodes from it into
  // the chunk's memory), and returns use's status, or the fetch error without calling it. The client asks for
  // one chunk's stored bytes at a time: a 16-byte read of a remote 4 GiB file moves one chunk. Must fail within
  // its timeout, never hang.
  using StoredUse = std::function<Status(const char* data, size_t size)>;
  virtual Status WithStored(uint32_t part, uint64_t offset, uint64_t length, const StoredUse& use) = 0;
  Status WithStored(const Entry& e, const StoredUse& use) { return WithStored(e.part, e.offset, e.stored_size, use); }
  // As WithStored, once the bytes the node gave for the range (its staged copy, its cache, a peer's reply) failed
  // their checksum: the image directory's bytes, which every copy was made from. Without a source of its own, the
  // fetcher asks as WithStored does.
  virtual Status WithSourceBytes(uint32_t part, uint64_t offset, uint64_t length, const StoredUse& use) {
    return WithStored(part, offset, length, use);
  }
  // Copies the stored bytes [offset, offset + length) of `part` into `dst` if the node-wide cache holds them whole
  // and they did not change while being copied (no daemon round-trip); false otherwise, with `dst` undefined. The
  // client copies a raw chunk straight into the reader's buffer this way (one copy instead of two) and checks it
  // there as it checks any chunk.
  virtual bool CopyCached(uint32_t /*part*/, uint64_t /*offset*/, uint64_t /*length*/, char* /*dst*/) { return false; }
  // Called in a forked child: drop connections the child must not share with its parent.
  virtual void AfterForkChild() {}
  // pthread_atfork prepare/parent: hold (then release) the fetcher's locks across fork, so the child never
  // inherits them held or its state half-updated. Client::AtForkPrepare/AtForkParent call these.
  virtual void AtForkPrepare() {}
  virtual void AtForkParent() {}
  // Called with every fd the fetcher keeps for itself (connections, passed memfds while held): the
  // interposer marks them internal so the program's close-all loops spare them. Null: no marking.
  virtual void SetInternalFdHook(void (*hook)(int fd)) { (void)hook; }
};

}  // namespace fanstore
