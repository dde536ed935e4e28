// Encoding of the client<->daemon socket messages and deadline-bounded socket I/O with fd passing.
#include "daemon_protocol.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "format.hpp"

namespace fanstore::daemon_proto {

using format::Load32;
using format::Load64;
using format::Store32;
using format::Store64;

namespace {

uint16_t Load16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void Store16(unsigned char* p, uint16_t v) {
  p[0] = static_cast<unsigned char>(v & 0xff);
  p[1] = static_cast<unsigned char>(v >> 8);
}

// Waits until fd is ready for `events` or the deadline passes. kTimeout / kIoError (peer hung up) / ok.
Status WaitReady(int fd, short events, int64_t deadline_ms, const char* what) {
  for (;;) {
    int64_t left = deadline_ms - NowMs();
    if (left <= 0) return Status(Code::kTimeout, std::string("daemon socket: timed out ") + what);
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, static_cast<int>(left > 1000000 ? 1000000 : left));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, std::string("daemon socket: poll while ") + what);
    }
    if (r == 0) continue;  // re-checks the deadline
    if (p.revents & events) return Status::Ok();
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
      return Status(Code::kIoError, std::string("daemon socket closed while ") + what);
  }
}

}  // namespace

int64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void EncodeRequest(const Request& r, unsigned char out[kRequestSize]) {
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
    Store64(out + 24, r.offset);
    Store64(out + 32, r.length);
  }
  Store64(out + 40, r.body_len);
}

bool DecodeRequest(const unsigned char in[kRequestSize], Request* r) {
  if (Load32(in) != kRequestMagic || Load16(in + 4) != kVersion) return false;
  r->type = static_cast<MsgType>(Load16(in + 6));
  r->req_id = Load64(in + 8);
  r->body_len = Load64(in + 40);
  if (r->type == MsgType::kPrefetch) {
    r->stream = Load64(in + 16);
    r->flags = Load32(in + 24);
  } else {
    r->part = Load32(in + 16);
    r->offset = Load64(in + 24);
    r->length = Load64(in + 32);
  }
  // Only a prefetch carries a body: anything else with one is a stream we cannot resynchronise.
  if (r->type != MsgType::kPrefetch && r->body_len != 0) return false;
  return r->type == MsgType::kHello || r->type == MsgType::kFetch || r->type == MsgType::kPrefetch ||
         r->type == MsgType::kCacheMap;
}

void EncodeReplyHeader(const ReplyHeader& h, unsigned char out[kReplyHeaderSize]) {
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

bool DecodeReplyHeader(const unsigned char in[kReplyHeaderSize], ReplyHeader* h) {
  if (Load32(in) != kReplyMagic || Load16(in + 4) != kVersion) return false;
  h->type = static_cast<MsgType>(Load16(in + 6));
  h->req_id = Load64(in + 8);
  uint32_t code = Load32(in + 16);
  if (code > static_cast<uint32_t>(Code::kNoMemory)) return false;  // (a narrowing cast could turn 256 into kOk)
  h->code = static_cast<Code>(code);
  h->msg_len = Load32(in + 20);
  h->payload_size = Load64(in + 24);
  h->flags = Load32(in + 32);
  h->shm_offset = Load64(in + 40);
  return true;
}

std::string EncodeHello(const HelloInfo& h) {
  std::string s(24, '\0');
  auto* p = reinterpret_cast<unsigned char*>(s.data());
  Store32(p + 0, h.rank);
  Store32(p + 4, h.nranks);
  Store32(p + 8, h.timeout_ms);
  Store32(p + 16, static_cast<uint32_t>(h.index_dir.size()));
  Store32(p + 20, static_cast<uint32_t>(h.partition_dir.size()));
  return s + h.index_dir + h.partition_dir;
}

bool DecodeHello(const std::string& s, HelloInfo* h) {
  if (s.size() < 24) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  h->rank = Load32(p + 0);
  h->nranks = Load32(p + 4);
  h->timeout_ms = Load32(p + 8);
  uint64_t il = Load32(p + 16), pl = Load32(p + 20);
  if (24 + il + pl != s.size()) return false;
  h->index_dir = s.substr(24, il);
  h->partition_dir = s.substr(24 + il, pl);
  return true;
}

std::string EncodePrefetchCounts(const PrefetchCounts& c) {
  std::string s(kPrefetchReplySize, '\0');
  auto* p = reinterpret_cast<unsigned char*>(s.data());
  Store64(p + 0, c.remote);
  Store64(p + 8, c.local);
  Store64(p + 16, c.missing);
  Store64(p + 24, c.remote_bytes);
  return s;
}

bool DecodePrefetchCounts(const std::string& s, PrefetchCounts* c) {
  if (s.size() != kPrefetchReplySize) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  c->remote = Load64(p + 0);
  c->local = Load64(p + 8);
  c->missing = Load64(p + 16);
  c->remote_bytes = Load64(p + 24);
  return true;
}

std::vector<std::string_view> SplitPaths(std::string_view body) {
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

Status SendAll(int fd, const void* p, size_t n, int64_t deadline_ms) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        Status s = WaitReady(fd, POLLOUT, deadline_ms, "sending a request");
        if (!s.ok()) return s;
        continue;
      }
      return Status(Code::kIoError, std::string("daemon socket: send: ") + std::strerror(errno));
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* p, size_t n, int64_t deadline_ms, int* fd_out, int spin_us) {
  char* c = static_cast<char*>(p);
  int64_t spin_until = spin_us > 0 ? NowUs() + spin_us : 0;
  while (n > 0) {
    iovec iov{c, n};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    ssize_t r = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (spin_until && NowUs() < spin_until) {
          sched_yield();
          continue;
        }
        spin_until = 0;
        Status s = WaitReady(fd, POLLIN, deadline_ms, "waiting for the daemon's reply");
        if (!s.ok()) return s;
        continue;
      }
      return Status(Code::kIoError, std::string("daemon socket: recv: ") + std::strerror(errno));
    }
    if (r == 0) return Status(Code::kIoError, "daemon closed the connection (did it exit?)");
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        int got;
        std::memcpy(&got, CMSG_DATA(cm), sizeof got);
        // Only one fd is ever expected; a second would leak, so close extras.
        if (fd_out && *fd_out < 0) *fd_out = got; else close(got);
      }
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status CreatePayloadMemfd(uint64_t n, int* fd, void** map) {
  int m = memfd_create("fanstore-payload", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m < 0) return Status::FromErrno(errno, "memfd_create for a payload");
  if (ftruncate(m, static_cast<off_t>(n)) != 0) {
    int err = errno;
    close(m);
    return Status::FromErrno(err, "ftruncate of a payload memfd");
  }
  // Clients check for F_SEAL_SHRINK before mapping: the size they validated cannot change under them.
  if (fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    int err = errno;
    close(m);
    return Status::FromErrno(err, "sealing the size of a payload memfd");
  }
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(m);
    return Status::FromErrno(err, "mmap of a payload memfd");
  }
  *fd = m;
  *map = p;
  return Status::Ok();
}

}  // namespace fanstore::daemon_proto
