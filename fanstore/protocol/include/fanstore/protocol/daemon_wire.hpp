// The client <-> daemon wire protocol (docs/daemon.md, "Client <-> daemon"): every constant, header layout
// and payload encoding, header-only, so that the client, the daemon, the trainer's prefetch hint and the
// tests all speak it from this one definition (tools/python/fanstore_prefetch.py is checked against it).
// Fixed little-endian headers. A fetch names a byte range of a partition (the daemon knows nothing of the file
// format beyond that); its payload lands in a per-connection shared reply area (a sealed memfd both sides map
// once, so a reply costs no page faults and no fd), or in a one-off memfd when bigger than the area may grow. No
// shared-memory names exist, so any number of daemons and clients can share a node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fanstore/protocol/little_endian.hpp"
#include "fanstore/status.hpp"  // fanstore::Code, the reply's code (the enum only: nothing here links)

namespace fanstore::daemon_proto {

using le::Load16;
using le::Load32;
using le::Load64;
using le::Store16;
using le::Store32;
using le::Store64;

// A status code read off the wire, or false for one this build does not know (a narrowing cast could turn 256
// into kOk).
inline bool CodeFromWire(uint32_t v, Code* c) {
  if (v > static_cast<uint32_t>(kLastCode)) return false;
  *c = static_cast<Code>(v);
  return true;
}

inline constexpr uint32_t kRequestMagic = 0x51445346;  // "FSDQ" little-endian
inline constexpr uint32_t kReplyMagic = 0x52445346;    // "FSDR"
inline constexpr uint16_t kVersion = 2;

// kCacheMap: the reply passes the fetch cache's shared memfd (kCacheMemfd), or kUnsupported when the daemon has none.
enum class MsgType : uint16_t { kHello = 1, kFetch = 2, kPrefetch = 3, kCacheMap = 4 };

// Client -> daemon, a fixed 48-byte header, then body_len bytes of body (prefetch only):
//   0 u32 magic | 4 u16 version | 6 u16 type | 8 u64 req_id
//   16 u32 part | 20 u32 flags | 24 u64 offset | 32 u64 length           (fetch: the stored bytes to read;
//                                  flags kFromSource: what this node gave for the range failed its checksum)
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
// A fetch's flag: the bytes this node had for the range (its staged copy, its fetch cache, a peer's reply) failed
// their checksum in the client. The daemon drops what it cached of the range and reads it again: from the other
// holders when the damaged copy is its own (its clients are not served from that copy any more), else from the image
// directory, the source every copy was made from. At most one chunk's stored bytes.
inline constexpr uint32_t kFromSource = 1;
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
// kCacheMemfd: exactly one fd rides on the header: the fetch cache's shared memfd
// (fanstore/protocol/include/fanstore/protocol/fetch_cache_view.hpp).
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
// reply's payload. A fetch reply's payload must be exactly the requested length (an error reply: empty).
inline constexpr uint32_t kMaxReplyMessage = 4096;
inline constexpr uint64_t kMaxHelloPayload = 64 * 1024;

// Hello reply payload: u32 rank | u32 nranks | u32 timeout_ms | u32 flags | u32 index_len | u32 pdir_len |
// index dir bytes | partition dir bytes [| u32 count | count x u32 rank]. Flags: kHelloStaged, every rank of the
// job has staged its partitions (the daemon serves before that; `fanstore wait --staged` waits for it);
// kHelloUnstaged, staging is over on every rank that reported, and the ranks listed at the end did not report
// (dead, or not answering): it is sent, list and all, only to a client whose hello request has kHelloAsksUnstaged
// in its `part` field (an older client takes the payload for malformed otherwise); kHelloStagingFailed, every rank
// reported and some of them failed (what they did not stage is read from elsewhere; an older client, which knows
// no such bit, waits on as for staging).
inline constexpr uint32_t kHelloStaged = 1;
inline constexpr uint32_t kHelloUnstaged = 2;
inline constexpr uint32_t kHelloStagingFailed = 4;
inline constexpr uint32_t kHelloAsksUnstaged = 1;
struct HelloInfo {
  uint32_t rank = 0, nranks = 0, timeout_ms = 0;
  uint32_t flags = 0;
  std::string index_dir;           // directory holding the staged index.fsi copy
  std::string partition_dir;       // directory holding this node's staged partitions
  std::vector<uint32_t> unstaged;  // with kHelloUnstaged: the ranks that did not report their staging
};

// Prefetch reply payload: u64 remote (queued for prefetch) | u64 local (staged on this node: nothing to do) |
// u64 missing (no such file in the image: absent, a directory, a symlink) | u64 remote_bytes (stored bytes queued).
struct PrefetchCounts {
  uint64_t remote = 0, local = 0, missing = 0, remote_bytes = 0;
};
inline constexpr size_t kPrefetchReplySize = 32;

inline void EncodeRequest(const Request& r, unsigned char out[kRequestSize]) {
  std::memset(out, 0, kRequestSize);
  Store32(out + 0, kRequestMagic);
  Store16(out + 4, kVersion);
  Store16(out + 6, static_cast<uint16_t>(r.type));
  Store64(out + 8, r.req_id);
  if (r.type == MsgType::kPrefetch) {
    Store64(out + 16, r.stream);
    Store32(out + 24, r.flags);
  } else {
    Store32(out + 16, r.part);
    Store32(out + 20, r.flags);
    Store64(out + 24, r.offset);
    Store64(out + 32, r.length);
  }
  Store64(out + 40, r.body_len);
}

inline bool DecodeRequest(const unsigned char in[kRequestSize], Request* r) {
  if (Load32(in) != kRequestMagic || Load16(in + 4) != kVersion) return false;
  r->type = static_cast<MsgType>(Load16(in + 6));
  r->req_id = Load64(in + 8);
  r->body_len = Load64(in + 40);
  if (r->type == MsgType::kPrefetch) {
    r->stream = Load64(in + 16);
    r->flags = Load32(in + 24);
  } else {
    r->part = Load32(in + 16);
    r->flags = Load32(in + 20);
    r->offset = Load64(in + 24);
    r->length = Load64(in + 32);
  }
  // Only a prefetch carries a body: anything else with one is a stream we cannot resynchronise.
  if (r->type != MsgType::kPrefetch && r->body_len != 0) return false;
  return r->type == MsgType::kHello || r->type == MsgType::kFetch || r->type == MsgType::kPrefetch ||
         r->type == MsgType::kCacheMap;
}

inline void EncodeReplyHeader(const ReplyHeader& h, unsigned char out[kReplyHeaderSize]) {
  std::memset(out, 0, kReplyHeaderSize);
  Store32(out + 0, kReplyMagic);
  Store16(out + 4, kVersion);
  Store16(out + 6, static_cast<uint16_t>(h.type));
  Store64(out + 8, h.req_id);
  Store32(out + 16, static_cast<uint32_t>(h.code));
  Store32(out + 20, h.msg_len);
  Store64(out + 24, h.payload_size);
  Store32(out + 32, h.flags);
  Store64(out + 40, h.shm_offset);
}

inline bool DecodeReplyHeader(const unsigned char in[kReplyHeaderSize], ReplyHeader* h) {
  if (Load32(in) != kReplyMagic || Load16(in + 4) != kVersion) return false;
  h->type = static_cast<MsgType>(Load16(in + 6));
  h->req_id = Load64(in + 8);
  if (!CodeFromWire(Load32(in + 16), &h->code)) return false;
  h->msg_len = Load32(in + 20);
  h->payload_size = Load64(in + 24);
  h->flags = Load32(in + 32);
  h->shm_offset = Load64(in + 40);
  return true;
}

inline std::string EncodeHello(const HelloInfo& h) {
  std::string s(24, '\0');
  auto* p = reinterpret_cast<unsigned char*>(s.data());
  Store32(p + 0, h.rank);
  Store32(p + 4, h.nranks);
  Store32(p + 8, h.timeout_ms);
  Store32(p + 12, h.flags);
  Store32(p + 16, static_cast<uint32_t>(h.index_dir.size()));
  Store32(p + 20, static_cast<uint32_t>(h.partition_dir.size()));
  s += h.index_dir + h.partition_dir;
  if (h.flags & kHelloUnstaged) {
    std::string tail(4 + 4 * h.unstaged.size(), '\0');
    auto* t = reinterpret_cast<unsigned char*>(tail.data());
    Store32(t, static_cast<uint32_t>(h.unstaged.size()));
    for (size_t i = 0; i < h.unstaged.size(); ++i) Store32(t + 4 + 4 * i, h.unstaged[i]);
    s += tail;
  }
  return s;
}

inline bool DecodeHello(const std::string& s, HelloInfo* h) {
  if (s.size() < 24) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  h->rank = Load32(p + 0);
  h->nranks = Load32(p + 4);
  h->timeout_ms = Load32(p + 8);
  h->flags = Load32(p + 12);
  uint64_t il = Load32(p + 16), pl = Load32(p + 20);
  uint64_t end = 24 + il + pl;
  h->unstaged.clear();
  if (h->flags & kHelloUnstaged) {
    if (end + 4 > s.size()) return false;
    const uint64_t n = Load32(p + end);
    if (end + 4 + 4 * n != s.size()) return false;
    for (uint64_t i = 0; i < n; ++i) h->unstaged.push_back(Load32(p + end + 4 + 4 * i));
    end += 4 + 4 * n;
  }
  if (end != s.size()) return false;
  h->index_dir = s.substr(24, il);
  h->partition_dir = s.substr(24 + il, pl);
  return true;
}

inline std::string EncodePrefetchCounts(const PrefetchCounts& c) {
  std::string s(kPrefetchReplySize, '\0');
  auto* p = reinterpret_cast<unsigned char*>(s.data());
  Store64(p + 0, c.remote);
  Store64(p + 8, c.local);
  Store64(p + 16, c.missing);
  Store64(p + 24, c.remote_bytes);
  return s;
}

inline bool DecodePrefetchCounts(const std::string& s, PrefetchCounts* c) {
  if (s.size() != kPrefetchReplySize) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  c->remote = Load64(p + 0);
  c->local = Load64(p + 8);
  c->missing = Load64(p + 16);
  c->remote_bytes = Load64(p + 24);
  return true;
}

inline std::vector<std::string_view> SplitPaths(std::string_view body) {
  std::vector<std::string_view> out;
  while (!body.empty()) {
    size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    if (!line.empty()) out.push_back(line);
    if (nl == std::string_view::npos) break;
    body.remove_prefix(nl + 1);
  }
  return out;
}

}  // namespace fanstore::daemon_proto
