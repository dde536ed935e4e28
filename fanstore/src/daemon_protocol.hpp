// The Unix-socket protocol between a client process and its node's daemon (docs/daemon.md), MPI-free.
// Fixed little-endian headers. A fetch names a byte range of a partition (the daemon knows nothing of the file
// format beyond that); its payload lands in a per-connection shared reply area (a sealed memfd both sides map
// once, so a reply costs no page faults and no fd), in a one-off memfd when bigger than the area may grow, or
// inline. No shared-memory names exist, so any number of daemons and clients can share a node.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fanstore/status.hpp"

namespace fanstore::daemon_proto {

inline constexpr uint32_t kRequestMagic = 0x51445346;  // "FSDQ" little-endian
inline constexpr uint32_t kReplyMagic = 0x52445346;    // "FSDR"
inline constexpr uint16_t kVersion = 2;

// kCacheMap: the reply passes the node cache's shared memfd (kCacheMemfd), or kUnsupported when the daemon has none.
enum class MsgType : uint16_t { kHello = 1, kFetch = 2, kPrefetch = 3, kCacheMap = 4 };

// Client -> daemon, a fixed 48-byte header, then body_len bytes of body (prefetch only):
//   0 u32 magic | 4 u16 version | 6 u16 type | 8 u64 req_id
//   16 u32 part | 20 u32 reserved | 24 u64 offset | 32 u64 length        (fetch: the stored bytes to read)
//   16 u64 stream | 24 u32 flags (prefetch: a hint replaces the previous one with the same stream id, unless
//                                  flags has kAppend; the body is the image-relative paths, '\n'-separated)
//   40 u64 body_len
inline constexpr size_t kRequestSize = 48;
struct Request {
  MsgType type = MsgType::kFetch;
  uint64_t req_id = 0;
  uint32_t part = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t stream = 0;
  uint32_t flags = 0;
  uint64_t body_len = 0;
};
inline constexpr uint32_t kAppend = 1;
// The longest range a fetch may name (a chunk is at most 64 MiB; whole stored files far below this): a longer
// one, or one reaching past format::kMaxStoredOffset, is refused before any cache or reader sees it.
inline constexpr uint64_t kMaxFetchLength = 1ull << 40;
// The largest prefetch body a daemon accepts (about a million paths); bigger hints are split by the sender.
inline constexpr uint64_t kMaxPrefetchBody = 64ull << 20;

// Daemon -> client, fixed 48-byte header, then msg_len bytes of error message, then the payload inline when
// flags has neither kPayloadInArea nor kPayloadInMemfd:
//   0 u32 magic | 4 u16 version | 6 u16 type | 8 u64 req_id | 16 u32 code (fanstore::Code) | 20 u32 msg_len
//   24 u64 payload_size | 32 u32 flags | 36 u32 reserved | 40 u64 shm_offset
// kPayloadInArea: the payload is payload_size bytes at shm_offset of the connection's reply area, valid until the
//   client sends its next request on this connection. With kNewArea, exactly one fd (a memfd whose size is sealed)
//   rides on the header's first byte and replaces the connection's area from this reply on.
// kPayloadInMemfd: exactly one fd (a size-sealed memfd) rides on the header, the payload at shm_offset of it.
// kCacheMemfd: exactly one fd rides on the header: the node cache's shared memfd (fanstore/src/shared_cache.hpp).
inline constexpr size_t kReplyHeaderSize = 48;
inline constexpr uint32_t kPayloadInArea = 1u << 0;
inline constexpr uint32_t kNewArea = 1u << 1;
inline constexpr uint32_t kPayloadInMemfd = 1u << 2;
inline constexpr uint32_t kCacheMemfd = 1u << 3;
struct ReplyHeader {
  MsgType type = MsgType::kFetch;
  uint64_t req_id = 0;
  Code code = Code::kOk;
  uint32_t msg_len = 0;
  uint64_t payload_size = 0;
  uint32_t flags = 0;
  uint64_t shm_offset = 0;
};

// Limits a client enforces on a reply before allocating anything (a reply over them is a protocol error and
// the connection is dropped): the error message (the daemon truncates longer ones), a hello's and a prefetch
// reply's payload. A fetch reply's payload must be exactly the requested length (or empty).
inline constexpr uint32_t kMaxReplyMessage = 4096;
inline constexpr uint64_t kMaxHelloPayload = 64 * 1024;
// Payloads up to this size may travel inline on the socket (when no reply area can be had).
inline constexpr uint64_t kInlineMax = 64 * 1024;

// Hello reply payload: u32 rank | u32 nranks | u32 timeout_ms | u32 reserved | u32 index_len | u32 pdir_len |
// index dir bytes | partition dir bytes.
struct HelloInfo {
  uint32_t rank = 0, nranks = 0, timeout_ms = 0;
  std::string index_dir;      // directory holding the staged index.fsi copy
  std::string partition_dir;  // directory holding this node's staged partitions
};

// Prefetch reply payload: u64 remote (queued for prefetch) | u64 local (staged on this node: nothing to do) |
// u64 missing (no such file in the image) | u64 remote_bytes (stored bytes queued).
struct PrefetchCounts {
  uint64_t remote = 0, local = 0, missing = 0, remote_bytes = 0;
};
inline constexpr size_t kPrefetchReplySize = 32;

void EncodeRequest(const Request& r, unsigned char out[kRequestSize]);
bool DecodeRequest(const unsigned char in[kRequestSize], Request* r);  // false: bad magic/version/type
void EncodeReplyHeader(const ReplyHeader& h, unsigned char out[kReplyHeaderSize]);
bool DecodeReplyHeader(const unsigned char in[kReplyHeaderSize], ReplyHeader* h);
std::string EncodeHello(const HelloInfo& h);
bool DecodeHello(const std::string& payload, HelloInfo* h);
std::string EncodePrefetchCounts(const PrefetchCounts& c);
bool DecodePrefetchCounts(const std::string& payload, PrefetchCounts* c);
// Splits a prefetch body into its paths (empty lines dropped; a trailing '\r' is kept: paths are bytes).
std::vector<std::string_view> SplitPaths(std::string_view body);

// Milliseconds (microseconds) on CLOCK_MONOTONIC; deadlines are absolute values of it.
int64_t NowMs();
int64_t NowUs();

// Blocking-with-deadline socket I/O for the client side (fd may be blocking or not; poll bounds every wait).
// SendAll: kTimeout past the deadline, kIoError when the peer is gone. RecvAll additionally collects at most
// one SCM_RIGHTS fd into *fd_out (-1 if none; the caller closes it). `spin_us`: before the first blocking poll,
// retry the non-blocking receive for up to this long (a reply from a busy daemon is often microseconds away,
// and a sleeping thread takes tens of microseconds to wake).
Status SendAll(int fd, const void* p, size_t n, int64_t deadline_ms);
Status RecvAll(int fd, void* p, size_t n, int64_t deadline_ms, int* fd_out, int spin_us = 0);

// Creates a memfd of `n` bytes mapped read-write at *map (caller munmaps). MFD_CLOEXEC; its size is sealed
// (F_SEAL_SHRINK | F_SEAL_GROW), so a client that maps it can never fault past a truncated end (SIGBUS).
Status CreatePayloadMemfd(uint64_t n, int* fd, void** map);

}  // namespace fanstore::daemon_proto
