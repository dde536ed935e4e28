// The Unix-socket protocol between a client process and its node's daemon (docs/daemon.md), MPI-free.
// Fixed little-endian headers; big payloads travel in a memfd passed with SCM_RIGHTS, so no shared-memory
// names exist and any number of daemons and clients can share a node.
#pragma once

#include <cstdint>
#include <string>

#include "fanstore/status.hpp"

namespace fanstore::daemon_proto {

inline constexpr uint32_t kRequestMagic = 0x51445346;  // "FSDQ" little-endian
inline constexpr uint32_t kReplyMagic = 0x52445346;    // "FSDR"
inline constexpr uint16_t kVersion = 1;

enum class MsgType : uint16_t { kHello = 1, kFetch = 2 };

// Client -> daemon, fixed 32 bytes:
//   0 u32 magic | 4 u16 version | 6 u16 type | 8 u64 req_id | 16 u32 entry id | 20 u32 reserved | 24 u64 reserved
inline constexpr size_t kRequestSize = 32;
struct Request {
  MsgType type = MsgType::kFetch;
  uint64_t req_id = 0;
  uint32_t entry = 0;
};

// Daemon -> client, fixed 48-byte header, then msg_len bytes of error message, then the payload inline
// unless flags has kPayloadInMemfd (then exactly one fd rides on the header's first byte, the payload
// being payload_size bytes at shm_offset of it):
//   0 u32 magic | 4 u16 version | 6 u16 type | 8 u64 req_id | 16 u32 code (fanstore::Code) | 20 u32 msg_len
//   24 u64 payload_size | 32 u32 flags | 36 u32 reserved | 40 u64 shm_offset
inline constexpr size_t kReplyHeaderSize = 48;
inline constexpr uint32_t kPayloadInMemfd = 1;
struct ReplyHeader {
  MsgType type = MsgType::kFetch;
  uint64_t req_id = 0;
  Code code = Code::kOk;
  uint32_t msg_len = 0;
  uint64_t payload_size = 0;
  uint32_t flags = 0;
  uint64_t shm_offset = 0;
};

// Payloads up to this size go inline on the socket; bigger ones in a memfd (one copy fewer for big files).
inline constexpr uint64_t kInlineMax = 64 * 1024;

// Limits a client enforces on a reply before allocating anything (a reply over them is a protocol error and
// the connection is dropped): the error message (the daemon truncates longer ones) and a hello's payload.
// A fetch reply's payload must be exactly the entry's stored size (or empty).
inline constexpr uint32_t kMaxReplyMessage = 4096;
inline constexpr uint64_t kMaxHelloPayload = 64 * 1024;

// Hello reply payload: u32 rank | u32 nranks | u32 timeout_ms | u32 reserved | u32 index_len | u32 pdir_len |
// index dir bytes | partition dir bytes.
struct HelloInfo {
  uint32_t rank = 0, nranks = 0, timeout_ms = 0;
  std::string index_dir;      // directory holding the staged index.fsi copy
  std::string partition_dir;  // directory holding this node's staged partitions
};

void EncodeRequest(const Request& r, unsigned char out[kRequestSize]);
bool DecodeRequest(const unsigned char in[kRequestSize], Request* r);  // false: bad magic/version
void EncodeReplyHeader(const ReplyHeader& h, unsigned char out[kReplyHeaderSize]);
bool DecodeReplyHeader(const unsigned char in[kReplyHeaderSize], ReplyHeader* h);
std::string EncodeHello(const HelloInfo& h);
bool DecodeHello(const std::string& payload, HelloInfo* h);

// Milliseconds on CLOCK_MONOTONIC; deadlines are absolute values of it.
int64_t NowMs();

// Blocking-with-deadline socket I/O for the client side (fd may be blocking or not; poll bounds every wait).
// SendAll: kTimeout past the deadline, kIoError when the peer is gone. RecvAll additionally collects at most
// one SCM_RIGHTS fd into *fd_out (-1 if none; the caller closes it).
Status SendAll(int fd, const void* p, size_t n, int64_t deadline_ms);
Status RecvAll(int fd, void* p, size_t n, int64_t deadline_ms, int* fd_out);

// Creates a memfd holding `n` writable bytes mapped at *map (caller munmaps). MFD_CLOEXEC; its size is sealed
// (F_SEAL_SHRINK | F_SEAL_GROW), so a client that maps it can never fault past a truncated end (SIGBUS).
Status CreatePayloadMemfd(uint64_t n, int* fd, void** map);

}  // namespace fanstore::daemon_proto
