// The daemon's MPI transport against a broken or hostile peer: rank 0 fetches through the real MpiTransport,
// rank 1 answers each request the way the scenario says, speaking the wire format of docs/daemon.md ("Daemon <->
// daemon") by hand. Whatever rank 1 sends, a fetch ends with the right bytes or an error, never other bytes, and
// draining what rank 1 announced costs bounded memory. Run: mpirun -np 2 transport_rogue_test [INDEX] (exit 0: all
// passed; INDEX runs one scenario).
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fanstore/protocol/image_format.hpp"
#include "mpi_transport.hpp"

namespace fd = fanstore::daemon;
using fanstore::Code;
using fanstore::Status;

namespace {

// The wire format (docs/daemon.md), written out independently of mpi_transport.cpp on purpose.
constexpr int kTagRequest = 0x4653, kTagReplyBase = 0x5000;
constexpr uint64_t kMaxMessage = 4096;  // rank 0's chunk size: a 10,000-byte reply comes as 3 chunks
constexpr uint32_t kPart = 1;           // held by rank 1 of 2
constexpr uint64_t kOffset = 12345, kLength = 10000;

char Byte(uint64_t at) { return static_cast<char>((at * 131 + 7) & 0xff); }

std::string Payload(uint64_t off, uint64_t n, bool garbage = false) {
  std::string s(n, '\0');
  for (uint64_t i = 0; i < n; ++i) s[i] = garbage ? static_cast<char>(0xA5) : Byte(off + i);
  return s;
}

std::string Header(uint64_t req_id, uint32_t code, const std::string& msg, uint64_t n, uint32_t chunks) {
  std::string h(32, '\0');
  fanstore::format::Store64(h.data(), req_id);
  fanstore::format::Store32(h.data() + 8, code);
  fanstore::format::Store32(h.data() + 12, static_cast<uint32_t>(msg.size()));
  fanstore::format::Store64(h.data() + 16, n);
  fanstore::format::Store32(h.data() + 24, chunks);
  return h + msg;
}

int TagUb() {
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  return flag ? *static_cast<int*>(ub) : 32767;
}

int ReplySlots() {
  int slots = std::max(1, std::min(TagUb(), 1 << 30) - kTagReplyBase + 1);
  return std::min(slots, 1 << 20);
}

// A chunk's tag on the chunk communicator: its request's id, modulo the tags there are.
int ChunkTag(uint64_t req_id) { return static_cast<int>(req_id % (static_cast<uint64_t>(TagUb()) + 1)); }

long MaxRssKiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// What rank 1 does with the one request of a scenario.
enum class Rogue {
  kGood,            // the bytes asked for, in one message
  kGoodChunked,     // the bytes asked for, as a header and 3 chunks
  kOversizedChunk,  // a header for 3 chunks, then a first chunk twice as big, then the rest: all garbage
  kWrongLength,     // 5 bytes more than asked for, in one message
  kHugeAnnounced,   // a header announcing 2^40 bytes in chunks, and nothing after it
  kStrayThenGood,   // a chunked reply carrying another request's id (2 chunks of 300,000 bytes), then kGoodChunked
  kError,           // an error reply with a message
  kExtraChunk,      // a good chunked reply, then one chunk more than announced (1,000 bytes of junk)
  kChunkedAtOnce,   // a good chunked reply in chunks of rank 0's size, every message started at once (MPI_Isend)
  kHugeDirect,      // one message of 32 MiB for the 10,000 bytes asked for (no chunks)
  kLandedChunked,   // a header with a 2 KiB message (received into the fetch's memory) announcing 3 chunks of junk
  kNoChunks,        // a good header announcing 3 chunks, and then nothing (a peer killed between header and chunks)
};

struct Step {
  Rogue rogue;
  bool want_ok;
};

// Fetches one after another through one transport: what one reply leaves behind must not touch the next.
struct Scenario {
  const char* name;
  std::vector<Step> steps;
  uint64_t max_message = kMaxMessage;  // rank 0's
  int slots = 0;                       // reply slots (tags) of rank 0; 0: as many as MPI_TAG_UB allows
  uint64_t length = kLength;           // of each fetch
  int timeout_ms = 10000;              // rank 0's fetch timeout
};

const Scenario kScenarios[] = {
    {"a good reply", {{Rogue::kGood, true}}},
    {"a good chunked reply", {{Rogue::kGoodChunked, true}}},
    {"a chunk bigger than announced", {{Rogue::kOversizedChunk, false}}},
    {"a payload longer than asked for", {{Rogue::kWrongLength, false}}},
    // With the daemon's default chunk size (1 GiB): a drain sized by what is announced would take a gigabyte.
    {"a header announcing 2^40 bytes", {{Rogue::kHugeAnnounced, false}}, uint64_t{1} << 30},
    {"a stray chunked reply, then the good one", {{Rogue::kStrayThenGood, true}}},
    {"an error reply", {{Rogue::kError, false}}},
    // The sink (the fetch cache) must not be asked to set 32 MiB aside for it.
    {"one message of 32 MiB for 10,000 bytes, then a good fetch", {{Rogue::kHugeDirect, false}, {Rogue::kGood, true}}},
    // 4 slots (3 for fetches): they wrap around, so a slot left with junk in it would be given to a later fetch.
    {"a chunk more than announced, then good chunked fetches",
     {{Rogue::kExtraChunk, true},
      {Rogue::kGoodChunked, true},
      {Rogue::kGoodChunked, true},
      {Rogue::kGoodChunked, true},
      {Rogue::kGoodChunked, true}},
     kMaxMessage,
     4},
    {"broken replies, then good chunked fetches",
     {{Rogue::kOversizedChunk, false},
      {Rogue::kGoodChunked, true},
      {Rogue::kHugeAnnounced, false},
      {Rogue::kGoodChunked, true},
      {Rogue::kStrayThenGood, true},
      {Rogue::kGoodChunked, true},
      {Rogue::kGoodChunked, true}},
     kMaxMessage,
     4},
    // 3 chunks of 1 MiB (rendezvous: they wait for rank 0 to match them) and a last one of 1,000 bytes (eager: it
    // is there at once). MPI may complete the last receive first, most of all over TCP; the reply must not be
    // handed on before the big chunks are in (a transport that took the last chunk's completion for the whole
    // reply's failed here).
    {"a chunked reply sent at once, its small last chunk ahead of the big ones",
     {{Rogue::kChunkedAtOnce, true}, {Rogue::kChunkedAtOnce, true}, {Rogue::kChunkedAtOnce, true}},
     uint64_t{1} << 20,
     0,
     (uint64_t{3} << 20) + 1000},
    // 4 slots: each such reply's slot must be free for the next fetch once its own failed (3 of them once took
    // every slot, and the next fetch spun for a free one forever), and its junk chunks never handed to a later one.
    {"headers too long for scratch announcing chunks, then good chunked fetches",
     {{Rogue::kLandedChunked, false},
      {Rogue::kLandedChunked, false},
      {Rogue::kLandedChunked, false},
      {Rogue::kGoodChunked, true},
      {Rogue::kGoodChunked, true}},
     kMaxMessage,
     4},
    // 4 slots, a 300 ms timeout: chunks announced that never come time their fetch out, and must not keep its slot
    // (3 such replies once refused every later fetch with "no reply slot is free").
    {"headers whose chunks never come, then good chunked fetches",
     {{Rogue::kNoChunks, false},
      {Rogue::kNoChunks, false},
      {Rogue::kNoChunks, false},
      {Rogue::kGoodChunked, true},
      {Rogue::kGoodChunked, true}},
     kMaxMessage,
     4,
     kLength,
     300},
};

class Sink final : public fd::FetchSink {
 public:
  char* Land(uint64_t n) override {
    largest_land = std::max(largest_land, n);
    mem_ = std::make_shared<std::vector<char>>(n);
    return mem_->data();
  }
  std::shared_ptr<void> Abandon() override { return std::move(mem_); }
  void Done(const Status& s, const char* data, uint64_t len) override {
    status = s;
    if (s.ok()) bytes.assign(data, len);
    done = true;
  }
  bool done = false;
  Status status;
  std::string bytes;
  uint64_t largest_land = 0;  // the most a reply made this sink (the fetch cache, in the daemon) set aside

 private:
  std::shared_ptr<std::vector<char>> mem_;
};

// The end of a step on both ranks (a nonblocking barrier: it never matches a blocking one), calling `progress`
// while it waits. False after 30 s.
bool StepBarrier(const std::function<void()>& progress) {
  MPI_Request b;
  MPI_Ibarrier(MPI_COMM_WORLD, &b);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int done = 0;;) {
    MPI_Test(&b, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    progress();
  }
}

void SendBytes(const std::string& b, int tag, MPI_Comm comm) {
  MPI_Send(b.data(), static_cast<int>(b.size()), MPI_BYTE, 0, tag, comm);
}

void PlayRogue(Rogue r, MPI_Comm chunk_comm, int slots, uint64_t max_message) {
  char req[32];
  MPI_Status st;
  MPI_Recv(req, 32, MPI_BYTE, 0, kTagRequest, MPI_COMM_WORLD, &st);
  uint64_t req_id = fanstore::format::Load64(req), off = fanstore::format::Load64(req + 16),
           len = fanstore::format::Load64(req + 24);
  int tag = kTagReplyBase + static_cast<int>(req_id % static_cast<uint64_t>(slots));
  // A header and its chunks, one blocking send after another, or (`at_once`) every send started before any ends.
  auto chunked = [&](uint64_t id, uint64_t n, uint64_t chunk, bool garbage, bool at_once = false) {
    std::vector<std::string> msgs{Header(id, 0, "", n, static_cast<uint32_t>((n + chunk - 1) / chunk))};
    std::string p = Payload(off, n, garbage);
    for (uint64_t at = 0; at < n; at += chunk) msgs.push_back(p.substr(at, std::min(chunk, n - at)));
    std::vector<MPI_Request> rs(msgs.size(), MPI_REQUEST_NULL);
    for (size_t i = 0; i < msgs.size(); ++i) {
      MPI_Comm comm = i ? chunk_comm : MPI_COMM_WORLD;
      const int t = i ? ChunkTag(id) : tag;
      if (!at_once) SendBytes(msgs[i], t, comm);
      else MPI_Isend(msgs[i].data(), static_cast<int>(msgs[i].size()), MPI_BYTE, 0, t, comm, &rs[i]);
    }
    MPI_Waitall(static_cast<int>(rs.size()), rs.data(), MPI_STATUSES_IGNORE);
  };
  switch (r) {
    case Rogue::kGood: SendBytes(Header(req_id, 0, "", len, 0) + Payload(off, len), tag, MPI_COMM_WORLD); break;
    case Rogue::kGoodChunked: chunked(req_id, len, kMaxMessage, false); break;
    case Rogue::kOversizedChunk: {
      SendBytes(Header(req_id, 0, "", len, 3), tag, MPI_COMM_WORLD);
      std::string junk = Payload(off, len, true);
      SendBytes(junk.substr(0, 2 * kMaxMessage), ChunkTag(req_id), chunk_comm);
      SendBytes(junk.substr(0, kMaxMessage), ChunkTag(req_id), chunk_comm);
      SendBytes(junk.substr(0, len - 2 * kMaxMessage), ChunkTag(req_id), chunk_comm);
      break;
    }
    case Rogue::kWrongLength:
      SendBytes(Header(req_id, 0, "", len + 5, 0) + Payload(off, len + 5), tag, MPI_COMM_WORLD);
      break;
    case Rogue::kHugeAnnounced:
      SendBytes(Header(req_id, 0, "", uint64_t{1} << 40, 1u << 20), tag, MPI_COMM_WORLD);
      break;
    case Rogue::kStrayThenGood:
      chunked(req_id + 7, 600000, 300000, true);  // rank 0 drains it: 2 chunks of 300,000 in 64 KiB of scratch
      chunked(req_id, len, kMaxMessage, false);
      break;
    case Rogue::kExtraChunk:
      // 1,000 bytes: small enough to go eagerly (a rendezvous message rank 0 never receives would block this
      // MPI_Send for good).
      chunked(req_id, len, kMaxMessage, false);
      SendBytes(Payload(off, 1000, true), ChunkTag(req_id), chunk_comm);
      break;
    case Rogue::kChunkedAtOnce: chunked(req_id, len, max_message, false, true); break;
    case Rogue::kHugeDirect: {
      const uint64_t n = uint64_t{32} << 20;
      SendBytes(Header(req_id, 0, "", n, 0) + std::string(n, 'x'), tag, MPI_COMM_WORLD);
      break;
    }
    case Rogue::kLandedChunked: {
      SendBytes(Header(req_id, 0, std::string(2048, 'm'), len, 3), tag, MPI_COMM_WORLD);
      std::string junk = Payload(off, len, true);
      for (uint64_t at = 0; at < len; at += kMaxMessage)
        SendBytes(junk.substr(at, std::min(kMaxMessage, len - at)), ChunkTag(req_id), chunk_comm);
      break;
    }
    case Rogue::kNoChunks: SendBytes(Header(req_id, 0, "", len, 3), tag, MPI_COMM_WORLD); break;
    case Rogue::kError:
      SendBytes(Header(req_id, static_cast<uint32_t>(Code::kNotFound), "no such range here", 0, 0), tag,
                MPI_COMM_WORLD);
      break;
  }
}

// Rank 0: the scenario's fetches, one after another, through a fresh transport (its own chunk communicator: receives
// a scenario leaves posted can never meet the next scenario's messages); true when every outcome is the one wanted.
bool Fetch(const Scenario& sc, MPI_Comm chunk_comm) {
  fd::DaemonStats stats;
  fd::TransportOptions o;
  o.rank = 0;
  o.nranks = 2;
  o.timeout_ms = sc.timeout_ms;  // only the scenario that sets it waits for it: other errors wanted are immediate
  o.max_message = sc.max_message;
  o.chunk_comm = chunk_comm;
  o.reply_slots = sc.slots;
  long rss0 = MaxRssKiB();
  bool pass = true;
  std::string why;
  {
    fd::MpiTransport t(nullptr, o, &stats);
    for (size_t i = 0; i < sc.steps.size(); ++i) {
      const Step& step = sc.steps[i];
      Sink sink;
      t.Fetch(fd::ByteRange{kPart, kOffset, sc.length}, &sink);
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!sink.done && std::chrono::steady_clock::now() < until) {
        if (!t.Progress()) std::this_thread::yield();
      }
      std::string got;
      bool ok = true;
      if (!sink.done) {
        ok = false;
        got = "the fetch never ended";
      } else if (step.want_ok && (!sink.status.ok() || sink.bytes != Payload(kOffset, sc.length))) {
        ok = false;
        got = sink.status.ok() ? "wrong bytes" : "failed: " + sink.status.ToString();
      } else if (!step.want_ok && sink.status.ok()) {
        ok = false;
        got = sink.bytes == Payload(kOffset, sc.length) ? "succeeded" : "succeeded with wrong bytes";
      } else {
        got = sink.status.ok() ? "the right bytes" : sink.status.ToString();
      }
      // A header, an error message and the range: nothing a peer announces may make the sink set aside more.
      if (sink.largest_land > sc.length + 32 + (64 << 10)) {
        ok = false;
        got += ", but " + std::to_string(sink.largest_land) + " bytes were set aside for it";
      }
      pass = pass && ok;
      why += (i ? "; " : "") + got;
      // Whatever was announced, draining it must not cost more than a little scratch. Rank 1's sends of chunks
      // over the eager limit end only once rank 0 has received them, which it does in Progress: so it goes on
      // until rank 1 says it sent everything of this step (a barrier waited on here would deadlock with them).
      if (!StepBarrier([&t] { t.Progress(); })) {
        std::printf("FAIL: %s (rank 1 could not send all of step %zu: rank 0 did not take it)\n", sc.name, i);
        std::fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      for (int k = 0; k < 100; ++k) t.Progress();
    }
    t.Shutdown();
  }
  long grown = MaxRssKiB() - rss0;
  if (grown > 64 * 1024) {
    pass = false;
    why += "; peak memory grew by " + std::to_string(grown / 1024) + " MiB";
  }
  std::printf("%s: %s (%s)\n", pass ? "PASS" : "FAIL", sc.name, why.c_str());
  std::fflush(stdout);
  return pass;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks != 2) {
    if (rank == 0) std::fprintf(stderr, "transport_rogue_test: run it with exactly 2 ranks (mpirun -np 2)\n");
    MPI_Finalize();
    return 2;
  }
  int slots = ReplySlots();
  int failed = 0;
  const char* only = argc > 1 ? argv[1] : nullptr;  // (debugging) one scenario, by its index
  int index = -1;
  for (const Scenario& sc : kScenarios) {
    ++index;
    if (only && atoi(only) != index) continue;
    MPI_Comm chunk_comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &chunk_comm);
    if (rank == 0) {
      failed += Fetch(sc, chunk_comm) ? 0 : 1;
    } else {
      for (const Step& step : sc.steps) {
        PlayRogue(step.rogue, chunk_comm, sc.slots > 0 ? std::min(slots, sc.slots) : slots, sc.max_message);
        StepBarrier([] {});  // false only when rank 0 is stuck, and then rank 0 aborts the job
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0) std::printf("%d of %zu scenarios failed\n", failed, std::size(kScenarios));
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  // Receives drained scenarios left posted (a header announcing chunks that never came) stay MPI's: finalize
  // within a bound rather than wait on them.
  alarm(20);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
