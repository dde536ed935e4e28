// The OpenFile a Client hands out (see client.hpp): range reads, read-ahead state, kernel fds.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "client_core.hpp"

namespace fanstore::detail {

class ClientFile final : public OpenFile, public std::enable_shared_from_this<ClientFile> {
 public:
  ClientFile(ClientCore& core, const Entry& e);
  uint32_t id() const override { return e_.id; }
  uint64_t size() const override { return e_.size; }
  Result<size_t> ReadAt(uint64_t offset, void* buf, size_t n) override;
  Result<size_t> Visit(uint64_t offset, size_t n, const std::function<size_t(const char*, size_t)>& sink) override;
  Result<int> KernelFd(int flags) override;

 private:
  Result<int> MakeKernelFd(int flags);
  // Sequential-read detection: queues the read-ahead; true when this read continues a stream.
  bool NoteRead(uint64_t off, uint64_t end);
  // What a read of [off, off + n) covers, clipped to the file, once it has been noted (NoteRead) and (with
  // `queue_span`) the chunks after its first queued for decoding in parallel. False when it covers nothing.
  struct Range {
    uint64_t off, end, first, last;
    bool streaming;
  };
  bool StartRead(uint64_t off, size_t n, Range* r, bool queue_span = true);
  // The chunks of a read spanning several of a remote file that it covers whole and the chunk cache does not
  // hold, when there are two or more: ReadAt loads them in parallel straight into the caller's buffer.
  std::vector<uint64_t> DirectChunks(const Range& r) const;
  // After a whole chunk was decoded into a caller's buffer: without a node chunk cache, a compressed one is also kept
  // in this process's chunk cache for its next read (unless it is streamed).
  void KeepDecoded(const Chunk& c, const char* bytes, bool streaming);
  // Queues chunks [first, last] for the decode threads, unless the reader has passed them by their turn.
  void Prefetch(uint64_t first, uint64_t last);
  // How whole chunks this open file decodes go to the node chunk cache: the first stream through a large file on the
  // node is not copied (one reader alone would pay an extra copy for nothing); every later read of the file,
  // by any process, fills the node's copy or reads it.
  ClientCore::Offer StreamOffer();

  ClientCore& core_;
  const Entry e_;
  const uint64_t chunks_;
  const uint32_t shift_;
  std::mutex mu_;                      // guards the read-ahead state below
  uint64_t seq_end_ = 0;               // where the last read ended
  int streak_ = 0;                     // sequential reads in a row
  uint64_t ahead_ = 0;                 // chunks below this were already queued for read-ahead
  std::atomic<uint64_t> reading_{0};   // the chunk the last reader is taking: queued decodes below it are moot
  std::atomic<int> stream_offer_{-1};  // StreamOffer's answer once asked (-1: not yet)
};

}  // namespace fanstore::detail
