// What the daemon's router asks of the other nodes: a byte range of a partition, landed where the router says.
// MpiTransport is the implementation; the socket protocol's fuzzer answers with a fake one (no MPI there).
#pragma once

#include <cstdint>
#include <memory>

#include "byte_range.hpp"
#include "fanstore/status.hpp"

namespace fanstore::daemon {

// The receiving side of one fetch (the daemon's router): where the reply lands, and what happened.
class FetchSink {
 public:
  virtual ~FetchSink() = default;
  // Memory for a reply message of `n` bytes (a 32-byte header, an error message, the payload); it must stay
  // valid until Done or Abandon. Null: no memory (the fetch fails).
  virtual char* Land(uint64_t n) = 0;
  // A receive into the landed memory was given up while MPI may still write it (the peer went silent mid-
  // transfer): the sink hands over an owner of that memory, which the transport keeps until MPI is done with it
  // (forever, if the peer is dead); the sink must not reuse it. Land may be called again for the next replica.
  virtual std::shared_ptr<void> Abandon() = 0;
  // The fetch is over: `data` (inside the landed memory) holds `len` bytes, or `s` says why not. Called exactly
  // once; the sink may delete itself in it.
  virtual void Done(const Status& s, const char* data, uint64_t len) = 0;
};

class PeerFetcher {
 public:
  virtual ~PeerFetcher() = default;
  // Starts fetching `r`; sink->Done is called exactly once, later or before this returns.
  virtual void Fetch(const ByteRange& r, FetchSink* sink) = 0;
  // Fetches `r` from `rank` alone. `staged_only`: from its staged copy only (StagedReader::kNotStagedYet while it
  // has not staged it yet; a zero-length range is a ping); else as Fetch asks each holder. Without it (a fake):
  // kUnsupported at once.
  virtual void FetchFrom(int rank, const ByteRange& r, bool staged_only, FetchSink* sink) {
    (void)rank;
    (void)r;
    (void)staged_only;
    sink->Done(Status(Code::kUnsupported, "no fetches from one rank here"), nullptr, 0);
  }
};

}  // namespace fanstore::daemon
