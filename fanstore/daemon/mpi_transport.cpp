// The daemon's MPI side: a single progress thread with nonblocking MPI (Isend/Improbe/Mrecv/Testsome) and a
// short condition-variable wait when idle, so many fetches are in flight without MPI_THREAD_MULTIPLE and an
// idle daemon does not spin. Messages (docs/daemon.md):
//   request  tag kTagRequest: u64 req_id | u32 entry id | u32 reserved                                (16 B)
//   reply    tag kTagReply:   u64 req_id | u32 code | u32 msg_len | u64 payload_size | u32 chunks | u32 0
//                             | message | payload (when chunks == 0)
//   chunks   tag kTagChunk:   payloads over kMaxMessage follow as `chunks` messages of <= kMaxMessage bytes
#include "mpi_transport.hpp"

#include <mpi.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon_protocol.hpp"
#include "format.hpp"
#include "log.hpp"
#include "placement.hpp"

namespace fanstore::daemon {
namespace {

namespace dp = daemon_proto;
using format::Load32;
using format::Load64;
using format::Store32;
using format::Store64;

constexpr int kTagRequest = 0x4653;
constexpr int kTagReply = 0x4654;
constexpr int kTagChunk = 0x4655;
constexpr size_t kRequestBytes = 16;
constexpr size_t kReplyHeader = 32;
// MPI counts are ints: anything bigger travels in chunks of this size.
constexpr uint64_t kMaxMessage = 1ull << 30;

// Receives a chunked (> kMaxMessage) payload. Owned jointly by the posted receives, so its memory stays valid
// until MPI is done with it even when the request it was for has failed over or finished meanwhile.
struct ChunkSink {
  int fd = -1;
  void* map = nullptr;
  uint64_t len = 0;
  int left = 0;         // receives still outstanding
  std::string scratch;  // used instead of a memfd when none could be made (the request then fails)
  ~ChunkSink() {
    if (map) munmap(map, len);
    if (fd >= 0) close(fd);
  }
};

// A fetch this rank started for a local client.
struct Pending {
  uint32_t id = 0;
  MpiTransport::Done done;
  std::vector<int> order;  // ranks to try, in order
  size_t attempt = 0;
  int64_t final_deadline = 0;
  int64_t attempt_start = 0;
  int64_t attempt_deadline = 0;
  Status last;                       // why the previous attempt failed
  std::shared_ptr<ChunkSink> sink;   // set while a chunked payload is arriving
  Status reply_status;               // the owner's code for a chunked reply
};

}  // namespace

struct MpiTransport::Impl {
  std::shared_ptr<const Image> img;
  TransportOptions o;
  DaemonStats* stats;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<uint32_t, Done>> queued;  // from the socket server, guarded by mu
  bool stop = false;
  std::thread th;
  std::function<bool(int64_t)> front_poll;
  std::function<void()> front_wake;

  // Progress-thread state only.
  std::unordered_map<uint64_t, Pending> pending;
  uint64_t next_req = 1;
  std::vector<MPI_Request> active;                   // outstanding Isend/Irecv
  std::vector<std::function<void()>> on_complete;    // parallel to `active`: run when it completes

  void Track(MPI_Request r, std::function<void()> f) {
    active.push_back(r);
    on_complete.push_back(std::move(f));
  }

  // False when MPI refuses at once (MPI_ERRORS_RETURN is set: e.g. the peer's connection is known dead).
  bool Send(int dest, int tag, std::shared_ptr<std::string> buf) {
    MPI_Request r;
    if (MPI_Isend(buf->data(), static_cast<int>(buf->size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD, &r) != MPI_SUCCESS)
      return false;
    Track(r, [buf] {});  // keeps the buffer alive until MPI is done with it
    return true;
  }

  void Finish(uint64_t req_id, Status s, Payload p) {
    auto it = pending.find(req_id);
    if (it == pending.end()) return;
    Done done = std::move(it->second.done);
    pending.erase(it);
    done(std::move(s), std::move(p));
  }

  // Sends the next attempt of `req_id`, or finishes it with the last error when no holder is left.
  void NextAttempt(uint64_t req_id) {
    Pending& p = pending.at(req_id);
    int64_t now = dp::NowMs();
    if (p.attempt >= p.order.size() || now >= p.final_deadline) {
      Status why = p.last.ok() ? Status(Code::kIoError, "no other rank holds this partition") : p.last;
      Finish(req_id, why, Payload{});
      return;
    }
    if (p.attempt > 0) stats->failovers.fetch_add(1, std::memory_order_relaxed);
    // Split what is left of the budget over the holders still to try, so a silent first replica leaves
    // time for the next one.
    int64_t left = p.final_deadline - now;
    p.attempt_start = now;
    p.attempt_deadline = now + left / static_cast<int64_t>(p.order.size() - p.attempt);
    auto buf = std::make_shared<std::string>(kRequestBytes, '\0');
    Store64(buf->data(), req_id);
    Store32(buf->data() + 8, p.id);
    if (!Send(p.order[p.attempt], kTagRequest, std::move(buf)))
      Fail(req_id, Status(Code::kIoError, "MPI_Isend failed (peer gone?)"));
  }

  void Fail(uint64_t req_id, Status why) {
    auto it = pending.find(req_id);
    if (it == pending.end()) return;
    Pending& p = it->second;
    p.last = Status(why.code(), "rank " + std::to_string(p.order[p.attempt]) + ": " + why.message());
    p.sink.reset();
    ++p.attempt;
    NextAttempt(req_id);
  }

  void StartQueued() {
    std::deque<std::pair<uint32_t, Done>> q;
    {
      std::lock_guard<std::mutex> g(mu);
      q.swap(queued);
    }
    for (auto& [id, done] : q) {
      uint64_t req_id = next_req++;
      Pending p;
      p.id = id;
      p.done = std::move(done);
      Entry e = img->Get(id);
      p.order = ReadOrder(id, e.part, o.replicated_part, o.nranks, o.replicas, o.rank);
      // 90% of the client's timeout: our "timeout" reply must reach the client before it gives up itself.
      p.final_deadline = dp::NowMs() + o.timeout_ms * 9 / 10;
      pending.emplace(req_id, std::move(p));
      NextAttempt(req_id);
    }
  }

  // A peer asks for a file of ours: read its stored bytes and reply (errors are replied, never dropped).
  void ServePeer(int src, const std::string& req) {
    uint64_t req_id = Load64(req.data());
    uint32_t id = Load32(req.data() + 8);
    stats->peer_requests.fetch_add(1, std::memory_order_relaxed);
    std::string stored;
    Status s;
    if (req.size() != kRequestBytes || id >= img->size()) {
      s = Status(Code::kInvalidArgument, "malformed request");
    } else {
      Entry e = img->Get(id);
      if (!e.is_reg()) s = Status(Code::kIsDirectory, std::string(e.path) + " is not a file");
      else if (!img->HasPartition(e.part))
        s = Status(Code::kIoError, "partition " + std::to_string(e.part) + " is not staged on this rank");
      else s = img->ReadStored(id, &stored);
    }
    std::string msg = s.ok() ? std::string() : s.message();
    uint64_t n = s.ok() ? stored.size() : 0;
    uint32_t chunks = n > kMaxMessage ? static_cast<uint32_t>((n + kMaxMessage - 1) / kMaxMessage) : 0;
    auto buf = std::make_shared<std::string>(kReplyHeader + msg.size() + (chunks ? 0 : n), '\0');
    Store64(buf->data(), req_id);
    Store32(buf->data() + 8, static_cast<uint32_t>(s.code()));
    Store32(buf->data() + 12, static_cast<uint32_t>(msg.size()));
    Store64(buf->data() + 16, n);
    Store32(buf->data() + 24, chunks);
    std::memcpy(buf->data() + kReplyHeader, msg.data(), msg.size());
    if (!chunks && n) std::memcpy(buf->data() + kReplyHeader + msg.size(), stored.data(), n);
    // If even the reply cannot be sent the asker times out and fails over: nothing more to do here.
    Send(src, kTagReply, std::move(buf));
    if (chunks) {
      auto all = std::make_shared<std::string>(std::move(stored));
      for (uint64_t off = 0; off < n; off += kMaxMessage) {
        MPI_Request r;
        MPI_Isend(all->data() + off, static_cast<int>(std::min(kMaxMessage, n - off)), MPI_BYTE, src, kTagChunk,
                  MPI_COMM_WORLD, &r);
        Track(r, [all] {});
      }
    }
    stats->bytes_sent.fetch_add(n, std::memory_order_relaxed);
  }

  // A reply to one of our fetches: matched by req_id and by the rank currently asked (late answers from a
  // replica we gave up on are dropped).
  void OnReply(MPI_Message m, int src, int count) {
    // Big payloads are received straight into a memfd the client will map: one copy fewer.
    bool shm = static_cast<uint64_t>(count) > kReplyHeader + dp::kInlineMax;
    Payload pl;
    void* map = nullptr;
    std::string small;
    char* base;
    if (shm) {
      Status s = dp::CreatePayloadMemfd(static_cast<uint64_t>(count), &pl.memfd, &map);
      if (!s.ok()) {
        // Still receive (MPI requires it) into memory; the request fails below.
        Error("%s", s.ToString().c_str());
        shm = false;
      }
    }
    if (!shm) small.resize(static_cast<size_t>(count));
    base = shm ? static_cast<char*>(map) : small.data();
    MPI_Mrecv(base, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
    if (count < static_cast<int>(kReplyHeader)) {
      if (map) munmap(map, static_cast<size_t>(count));
      return;
    }
    uint64_t req_id = Load64(base);
    Code code = static_cast<Code>(Load32(base + 8));
    uint32_t msg_len = Load32(base + 12);
    uint64_t n = Load64(base + 16);
    uint32_t chunks = Load32(base + 24);
    std::string msg(base + kReplyHeader, std::min<uint64_t>(msg_len, count - kReplyHeader));
    auto it = pending.find(req_id);
    bool current = it != pending.end() && it->second.attempt < it->second.order.size() &&
                   it->second.order[it->second.attempt] == src && !it->second.sink;
    if (chunks) {
      if (map) munmap(map, static_cast<size_t>(count));
      // The chunks must be received whatever happens to the request, into a memfd (or scratch on failure).
      auto sink = std::make_shared<ChunkSink>();
      Status ms = dp::CreatePayloadMemfd(n, &sink->fd, &sink->map);
      if (ms.ok()) sink->len = n;
      else sink->scratch.resize(kMaxMessage);
      for (uint64_t off = 0; off < n; off += kMaxMessage) {
        MPI_Request r;
        char* dst = sink->map ? static_cast<char*>(sink->map) + off : sink->scratch.data();
        MPI_Irecv(dst, static_cast<int>(std::min(kMaxMessage, n - off)), MPI_BYTE, src, kTagChunk, MPI_COMM_WORLD, &r);
        ++sink->left;
        Track(r, [this, req_id, sink, n] {
          if (--sink->left > 0) return;
          auto p = pending.find(req_id);
          if (p == pending.end() || p->second.sink != sink) return;  // abandoned meanwhile: just drop the bytes
          p->second.sink.reset();
          if (!p->second.reply_status.ok()) return Fail(req_id, p->second.reply_status);
          Payload out;
          out.memfd = std::exchange(sink->fd, -1);
          out.size = n;
          stats->bytes_received.fetch_add(n, std::memory_order_relaxed);
          Finish(req_id, Status::Ok(), std::move(out));
        });
      }
      if (!current) return;
      if (!ms.ok()) return Fail(req_id, ms);
      it->second.sink = sink;
      it->second.reply_status = code == Code::kOk ? Status::Ok() : Status(code, msg);
      return;
    }
    if (!current) {
      if (map) munmap(map, static_cast<size_t>(count));
      return;  // late or duplicate answer
    }
    if (code != Code::kOk) {
      if (map) munmap(map, static_cast<size_t>(count));
      return Fail(req_id, Status(code, msg));
    }
    uint64_t off = kReplyHeader + msg_len;
    if (off + n != static_cast<uint64_t>(count)) {
      if (map) munmap(map, static_cast<size_t>(count));
      return Fail(req_id, Status(Code::kIoError, "malformed reply"));
    }
    if (shm) {
      munmap(map, static_cast<size_t>(count));
      pl.offset = off;
      pl.size = n;
    } else {
      pl.bytes.assign(small.data() + off, n);
    }
    stats->bytes_received.fetch_add(n, std::memory_order_relaxed);
    Finish(req_id, Status::Ok(), std::move(pl));
  }

  // Drains every message that has arrived; true if there was any.
  bool PollIncoming() {
    bool any = false;
    for (int tag : {kTagRequest, kTagReply}) {
      for (;;) {
        int flag = 0;
        MPI_Message m;
        MPI_Status st;
        MPI_Improbe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &flag, &m, &st);
        if (!flag) break;
        any = true;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (tag == kTagRequest) {
          std::string req(static_cast<size_t>(count), '\0');
          MPI_Mrecv(req.data(), count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
          ServePeer(st.MPI_SOURCE, req);
        } else {
          OnReply(m, st.MPI_SOURCE, count);
        }
      }
    }
    return any;
  }

  // Completes finished sends/receives (running their callbacks); true if any completed.
  bool Reap() {
    if (active.empty()) return false;
    int outcount = 0;
    std::vector<int> idx(active.size());
    MPI_Testsome(static_cast<int>(active.size()), active.data(), &outcount, idx.data(), MPI_STATUSES_IGNORE);
    if (outcount == MPI_UNDEFINED || outcount == 0) return false;
    std::vector<std::function<void()>> done;
    for (int i = 0; i < outcount; ++i) done.push_back(std::move(on_complete[idx[i]]));
    // Completed handles are MPI_REQUEST_NULL now; compact both arrays.
    size_t w = 0;
    for (size_t r = 0; r < active.size(); ++r) {
      if (active[r] == MPI_REQUEST_NULL) continue;
      active[w] = active[r];
      on_complete[w] = std::move(on_complete[r]);
      ++w;
    }
    active.resize(w);
    on_complete.resize(w);
    // Callbacks may post new transfers (Track), so they run after the arrays are consistent again.
    for (auto& f : done) f();
    return true;
  }

  void CheckDeadlines() {
    int64_t now = dp::NowMs();
    std::vector<uint64_t> late;
    for (auto& [id, p] : pending)
      if (now >= p.attempt_deadline) late.push_back(id);
    for (uint64_t id : late) {
      auto it = pending.find(id);
      if (it == pending.end()) continue;
      int64_t waited = it->second.attempt_deadline - it->second.attempt_start;
      Fail(id, Status(Code::kTimeout, "no answer within " + std::to_string(waited) + " ms (daemon stopped or dead?)"));
    }
  }

  void Loop() {
    int idle = 0;
    for (;;) {
      bool stopping;
      {
        std::lock_guard<std::mutex> g(mu);
        stopping = stop;
      }
      if (stopping) break;
      bool busy = front_poll && front_poll(0);
      StartQueued();
      busy |= PollIncoming();
      busy |= Reap();
      CheckDeadlines();
      if (busy) {
        idle = 0;
        continue;
      }
      // Nothing to do. MPI has no fd to poll, so the wait is adaptive: a few yields right after traffic
      // (a reply or a rendezvous step is usually microseconds away), then waits for client I/O (poll) that
      // grow from 20 us to 2 ms the longer we stay idle. Client bytes end the wait at once.
      ++idle;
      if (idle < 64) {
        std::this_thread::yield();
        continue;
      }
      int64_t wait_us = idle < 2000 ? 20 : idle < 4000 ? 200 : 2000;
      if (front_poll) {
        if (front_poll(wait_us)) idle = 0;
        continue;
      }
      std::unique_lock<std::mutex> lk(mu);
      if (cv.wait_for(lk, std::chrono::microseconds(wait_us), [&] { return stop || !queued.empty(); })) idle = 0;
    }
    // Shutting down: every waiting client gets an answer; transfers still in flight are abandoned.
    std::vector<uint64_t> ids;
    for (auto& [id, p] : pending) ids.push_back(id);
    for (uint64_t id : ids) Finish(id, Status(Code::kIoError, "daemon is shutting down"), Payload{});
    std::deque<std::pair<uint32_t, Done>> q;
    {
      std::lock_guard<std::mutex> g(mu);
      q.swap(queued);
    }
    for (auto& [id, done] : q) done(Status(Code::kIoError, "daemon is shutting down"), Payload{});
    for (MPI_Request& r : active)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    active.clear();
    on_complete.clear();
  }
};

MpiTransport::MpiTransport(std::shared_ptr<const Image> image, TransportOptions opts, DaemonStats* stats)
    : impl_(std::make_unique<Impl>()) {
  impl_->img = std::move(image);
  impl_->o = opts;
  impl_->stats = stats;
}

MpiTransport::~MpiTransport() { Stop(); }

void MpiTransport::SetFrontEnd(std::function<bool(int64_t)> poll, std::function<void()> wake) {
  impl_->front_poll = std::move(poll);
  impl_->front_wake = std::move(wake);
}

void MpiTransport::Start() {
  impl_->th = std::thread([this] {
    // The default 50 us timer slack would stretch every short idle wait (and so every remote read) by 50 us.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    impl_->Loop();
  });
}

void MpiTransport::Stop() {
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->front_wake) impl_->front_wake();
  if (impl_->th.joinable()) impl_->th.join();
  // The front end may be destroyed after this: a second Stop (the destructor's) must not touch it.
  impl_->front_poll = nullptr;
  impl_->front_wake = nullptr;
}

void MpiTransport::Fetch(uint32_t id, Done done) {
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->stop) {
      done(Status(Code::kIoError, "daemon is shutting down"), Payload{});
      return;
    }
    impl_->queued.emplace_back(id, std::move(done));
  }
  impl_->cv.notify_one();
}

}  // namespace fanstore::daemon
