// Stager: background staging, one read of the image directory per byte (see stager.hpp).
#include "stager.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "fanstore/protocol/payload_memfd.hpp"
#include "log.hpp"
#include "placement.hpp"

namespace fanstore::daemon {
namespace {

namespace dp = daemon_proto;
constexpr int kTagTurn = 1;
constexpr int kTagTally = 2;
constexpr size_t kMaxQueued = 16;  // pieces read and waiting to be verified, at most (the reader waits)
constexpr int kVerifiers = 2;
constexpr int kMaxRefusals = 2;  // a piece refused this often is read from the image directory instead
constexpr int64_t kPingUs = 1000000;
constexpr int kFetchWindow = 8;  // pieces being fetched from other ranks at once

// MPI_Test that says whether `r` is complete.
bool Tested(MPI_Request* r) {
  int flag = 0;
  MPI_Test(r, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

}  // namespace

// Where a piece (or a ping) fetched from another rank lands; deletes itself when done.
class Stager::PieceSink final : public FetchSink {
 public:
  enum Kind { kPiece, kTurnPing, kTallyPing };
  PieceSink(Stager* st, Job j, int from, Kind kind) : st_(st), job_(j), from_(from), kind_(kind) {}
  char* Land(uint64_t n) override {
    mem_.reset(new (std::nothrow) char[n ? n : 1]);
    return mem_.get();
  }
  std::shared_ptr<void> Abandon() override { return std::shared_ptr<char[]>(mem_.release()); }
  void Done(const Status& s, const char* data, uint64_t len) override {
    if (kind_ == kTurnPing) st_->OnPing(s);
    else if (kind_ == kTallyPing) st_->OnTallyPing(from_, s);
    else st_->OnPiece(job_, from_, std::move(mem_), s, data, len);
    delete this;
  }

 private:
  Stager* st_;
  Job job_;
  int from_;
  Kind kind_;
  std::unique_ptr<char[]> mem_;
};

Stager::Stager(StagerOptions o, std::shared_ptr<const Image> index, std::vector<StagedPart> parts, StagedReader* reader,
               ImageDirReader* image_dir, MpiTransport* transport, StagedFiles* files)
    : o_(o),
      index_(std::move(index)),
      parts_(std::move(parts)),
      remaining_(new std::atomic<size_t>[parts_.size()]),
      reader_(reader),
      image_dir_(image_dir),
      transport_(transport),
      files_(files),
      said_down_(static_cast<size_t>(std::max(o.nranks, 1)), false) {
  for (uint32_t i = 0; i < parts_.size(); ++i) {
    const PartLayout& l = parts_[i].layout;
    idx_of_[l.part] = i;
    remaining_[i].store(l.pieces(), std::memory_order_relaxed);
    total_bytes_ += l.size;
    for (uint32_t k = 0; k < l.pieces(); ++k) {
      const bool own = PieceReader(l.part, k, o_.replicated_part, o_.nranks, o_.replicas) == o_.rank;
      if (own) own_reads_.push_back({i, k, true});
      else fetch_q_.push_back({i, k});
    }
  }
}

Stager::~Stager() {
  Stop();
  for (StagedPart& p : parts_)
    if (p.wfd >= 0) close(p.wfd);
  // Receives still posted into this object's buffers (tallies of ranks that never reported, the reading turn) are
  // cancelled while MPI is up: MPI_Finalize must not write into freed memory.
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (finalized) return;
  auto cancel = [](MPI_Request& r) {
    if (r == MPI_REQUEST_NULL) return;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  };
  for (MPI_Request& r : tally_recv_) cancel(r);
  cancel(turn_recv_);
}

void Stager::Start() {
  auto run = [this](void (Stager::*loop)()) {
    return [this, loop] {
      (this->*loop)();
      std::lock_guard<std::mutex> g(mu_);
      ++exited_;
      cv_.notify_all();
    };
  };
  threads_.emplace_back(run(&Stager::ReaderLoop));
  for (int i = 0; i < kVerifiers; ++i) threads_.emplace_back(run(&Stager::VerifyLoop));
}

bool Stager::Stop(int64_t wait_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  stop_ = true;
  cv_.notify_all();
  auto all_out = [&] { return exited_ == threads_.size(); };
  bool out = true;
  if (wait_ms < 0) cv_.wait(lk, all_out);
  else out = cv_.wait_for(lk, std::chrono::milliseconds(wait_ms), all_out);
  lk.unlock();
  for (auto& t : threads_) out ? t.join() : t.detach();
  threads_.clear();
  exited_ = 0;
  return out;
}

Status Stager::status() const {
  std::lock_guard<std::mutex> g(mu_);
  return status_;
}

void Stager::Post(Event e) {
  std::lock_guard<std::mutex> g(mu_);
  events_.push_back(e);
}

void Stager::Fail(const Status& s) {
  reader_->StagingFailed();
  bool first = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    first = status_.ok();
    if (first) status_ = s;
    stop_ = true;
    events_.push_back({EventKind::kFailed, {}});
  }
  cv_.notify_all();
  if (first) Error("staging failed here: %s", s.ToString().c_str());  // the line rank 0's tally points to
}

void Stager::AddRead(Job j) {
  {
    std::lock_guard<std::mutex> g(mu_);
    read_q_.push_back(j);
  }
  cv_.notify_all();
}

// ---- threads ---------------------------------------------------------------------------------------------------

void Stager::ReaderLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !hurried_.empty() || (!read_q_.empty() && verify_q_.size() < kMaxQueued); });
    if (stop_) return;
    const bool at_once = !hurried_.empty();
    std::deque<Job>& q = at_once ? hurried_ : read_q_;
    Job j = q.front();
    q.pop_front();
    reading_ = j;
    rush_reading_ = false;
    rush_ = false;
    lk.unlock();
    const PartLayout& l = parts_[j.idx].layout;
    const uint64_t len = l.length(j.piece);
    std::unique_ptr<char[]> mem(new (std::nothrow) char[len ? len : 1]);
    bool interrupted = false;
    Status s = mem ? image_dir_->ReadForStaging(
                         l.part, l.begin(j.piece), len, mem.get(), [this] { return stop_.load() || rush_.load(); },
                         at_once, &interrupted)
                   : Status(Code::kNoMemory, "no memory for a " + std::to_string(len) + "-byte piece");
    lk.lock();
    reading_.reset();
    if (interrupted && !stop_) {
      // A reader waits for a piece: it goes first (this one, if it is the one), then this one in its turn.
      (rush_reading_ ? hurried_ : read_q_).push_front(j);
      continue;
    }
    if (!s.ok()) {
      lk.unlock();
      if (!stop_) Fail(s);
      return;
    }
    verify_q_.push_back({j, mem.get(), std::move(mem)});
    if (j.own && --own_left_ == 0) events_.push_back({EventKind::kReadsDone, j});
    cv_.notify_all();
  }
}

void Stager::VerifyLoop() {
  std::vector<char> scratch;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !verify_q_.empty(); });
    if (stop_) return;
    Work w = std::move(verify_q_.front());
    verify_q_.pop_front();
    cv_.notify_all();  // the reader may be waiting for room
    lk.unlock();
    StagedPart& p = parts_[w.job.idx];
    const PartLayout& l = p.layout;
    const uint64_t len = l.length(w.job.piece);
    Status s = VerifyPiece(*index_, l, w.job.piece, w.data, &scratch);
    if (!s.ok() && w.from >= 0) {
      Error("staging: a piece of partition %u from rank %d was damaged in transit (%s); fetching it again", l.part,
            w.from, s.ToString().c_str());
      Post({EventKind::kRefetch, w.job});
      lk.lock();
      continue;
    }
    if (s.ok()) s = WriteFullAt(p.wfd, w.data, len, l.begin(w.job.piece), "write " + p.tmp);
    if (!s.ok()) return Fail(s);
    reader_->MarkPiece(l.part, w.job.piece);
    written_bytes_.fetch_add(len, std::memory_order_relaxed);
    if (remaining_[w.job.idx].fetch_sub(1) == 1) {
      // The last piece: nothing writes this file any more.
      close(p.wfd);
      p.wfd = -1;
      s = files_->Commit(p.tmp, p.final_path);
      if (!s.ok()) return Fail(s);
      Post({EventKind::kComplete, w.job});
    }
    lk.lock();
  }
}

// ---- progress thread -------------------------------------------------------------------------------------------

bool Stager::WillRead(uint32_t part, size_t piece) const {
  return have_turn_ && !stop_ && idx_of_.count(part) &&
         PieceReader(part, piece, o_.replicated_part, o_.nranks, o_.replicas) == o_.rank;
}

void Stager::Hurry(uint32_t part, size_t piece) {
  auto it = idx_of_.find(part);
  if (it == idx_of_.end()) return;
  auto same = [&](const Job& q) { return q.idx == it->second && q.piece == piece; };
  {
    std::lock_guard<std::mutex> g(mu_);
    if (reading_ && same(*reading_)) {
      rush_reading_ = true;  // waiting for its turn, maybe: read it now
    } else {
      auto j = std::find_if(read_q_.begin(), read_q_.end(), same);
      if (j == read_q_.end()) return;  // read already, or hurried already
      hurried_.push_back(*j);
      read_q_.erase(j);
    }
    rush_ = true;
  }
  cv_.notify_all();
}

void Stager::StartReads() {
  have_turn_ = true;
  {
    std::lock_guard<std::mutex> g(mu_);
    own_left_ = own_reads_.size();
    for (const Job& j : own_reads_) read_q_.push_back(j);
  }
  cv_.notify_all();
  if (own_reads_.empty()) Post({EventKind::kReadsDone, {}});
}

void Stager::OnPiece(const Job& j, int from, std::unique_ptr<char[]> mem, const Status& s, const char* data,
                     uint64_t len) {
  --inflight_;
  if (stop_) return;
  const PartLayout& l = parts_[j.idx].layout;
  if (s.ok() && len == l.length(j.piece)) {
    received_bytes_.fetch_add(len, std::memory_order_relaxed);
    if (received_pieces_++ == o_.corrupt_piece && len > 0) mem[static_cast<size_t>(data - mem.get()) + len / 2] ^= 0x5A;
    {
      std::lock_guard<std::mutex> g(mu_);
      verify_q_.push_back({j, data, std::move(mem), from});
    }
    cv_.notify_all();
    return;
  }
  if (s.code() == StagedReader::kNotStagedYet) {
    // Its reader has not got there yet: ask again, backing off to 100 ms.
    Job r = j;
    r.wait_us = std::clamp<int64_t>(r.wait_us * 2, 1000, 100000);
    r.not_before_us = dp::NowUs() + r.wait_us;
    retry_.push(r);
    return;
  }
  // Gone, or given up staging: read it here.
  if (from >= 0 && from < static_cast<int>(said_down_.size()) && !said_down_[static_cast<size_t>(from)]) {
    said_down_[static_cast<size_t>(from)] = true;
    Error(
        "staging: rank %d did not send a piece of partition %u (%s); this rank reads such pieces from the image "
        "directory itself",
        from, l.part, s.ok() ? "wrong length" : s.ToString().c_str());
  }
  AddRead(j);
}

void Stager::OnPing(const Status& s) {
  ping_inflight_ = false;
  if (s.ok() || have_turn_ || stop_) return;
  Error(
      "staging: rank %d, whose turn to read the image directory comes before this rank's (--stage-readers), is "
      "not answering (%s); reading now",
      o_.rank - o_.readers, s.ToString().c_str());
  StartReads();
}

void Stager::OnTallyPing(int r, const Status& s) {
  tally_ping_inflight_ = false;
  Peer& p = peer_[static_cast<size_t>(r)];
  if (p == Peer::kIn) return;
  if (s.ok()) {
    peers_changed_ |= p != Peer::kWaiting;
    p = Peer::kWaiting;  // alive: still staging
  } else if (p == Peer::kWaiting) {
    p = Peer::kDown;
    peers_changed_ = true;
    Error(
        "staging: rank %d has not reported its staging and does not answer (%s): counting it as down (its "
        "partitions are not staged on its node) until it reports",
        r, s.ToString().c_str());
  }
}

void Stager::ExpectTallies() {
  const size_t n = static_cast<size_t>(o_.nranks);
  tally_from_.assign(n, Tally{});
  tally_recv_.assign(n, MPI_REQUEST_NULL);
  tally_send_.assign(n, MPI_REQUEST_NULL);
  peer_.assign(n, Peer::kWaiting);
  peer_[static_cast<size_t>(o_.rank)] = Peer::kIn;
  for (int r = 0; r < o_.nranks; ++r) {
    if (r == o_.rank) continue;
    const size_t i = static_cast<size_t>(r);
    if (int rc = MPI_Irecv(&tally_from_[i], 5, MPI_UINT64_T, r, kTagTally, o_.comm, &tally_recv_[i]);
        rc != MPI_SUCCESS) {
      // Not waited for forever: that rank counts as down (a ping cannot bring it back without its tally).
      Error("staging: no tally can come from rank %d (MPI error %d); counting it as down", r, rc);
      peer_[i] = Peer::kDown;
    }
  }
}

void Stager::StartTally() {
  tally_in_ = Tally{status().ok() ? 0u : 1u, image_dir_->staging_bytes(), received_bytes_.load(), refetched_,
                    written_bytes_.load()};
  static_assert(sizeof(Tally) == 5 * sizeof(uint64_t));
  own_failure_counted_ = tally_in_.failed_ranks == 0;
  peers_changed_ = true;
  // The first ping a second from now: in a job whose ranks all finish, their tallies come well before.
  tally_sent_us_ = last_tally_ping_us_ = dp::NowUs();
  for (int r = 0; r < o_.nranks; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (r == o_.rank || peer_[i] == Peer::kDown) continue;
    if (int rc = MPI_Isend(&tally_in_, 5, MPI_UINT64_T, r, kTagTally, o_.comm, &tally_send_[i]); rc != MPI_SUCCESS) {
      Error("staging: this rank's tally could not be sent to rank %d (MPI error %d); counting it as down", r, rc);
      peer_[i] = Peer::kDown;
    }
  }
}

// The other ranks' tallies that came in, and this rank's failure once its tally is out (sent, or given a ping's
// time): then every rank hears of it from this one.
bool Stager::TestTallies(int64_t now) {
  bool did = false;
  // One MPI_Testsome a turn, not one MPI_Test per rank: this runs on every turn of the progress loop while staging.
  int count = 0;
  arrived_.resize(tally_recv_.size());
  MPI_Testsome(static_cast<int>(tally_recv_.size()), tally_recv_.data(), &count, arrived_.data(), MPI_STATUSES_IGNORE);
  for (int k = 0; k < count && count != MPI_UNDEFINED; ++k) {
    const size_t i = static_cast<size_t>(arrived_[static_cast<size_t>(k)]);
    if (peer_[i] == Peer::kIn) continue;
    peer_[i] = Peer::kIn;
    peers_changed_ = did = true;
    if (tally_from_[i].failed_ranks > 0) failures_heard_.fetch_add(1, std::memory_order_release);
  }
  for (MPI_Request& r : tally_send_)  // (all null before StartTally)
    if (r != MPI_REQUEST_NULL) Tested(&r);
  if (!own_failure_counted_ &&
      (now - tally_sent_us_ >= kPingUs ||
       std::all_of(tally_send_.begin(), tally_send_.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; }))) {
    own_failure_counted_ = true;
    failures_heard_.fetch_add(1, std::memory_order_release);
  }
  return did;
}

// The other ranks' tallies as they come, pings to those not heard from (one a second, round robin), and the
// outcome once every rank has reported or counts as down -- again if the ranks counted down report after all.
bool Stager::PollTally(int64_t now) {
  bool did = TestTallies(now);
  if (!tally_ping_inflight_ && now - last_tally_ping_us_ >= kPingUs) {
    for (int k = 0; k < o_.nranks; ++k) {
      const int r = (next_tally_ping_ + k) % o_.nranks;
      if (peer_[static_cast<size_t>(r)] == Peer::kIn) continue;
      next_tally_ping_ = (r + 1) % o_.nranks;
      last_tally_ping_us_ = now;
      tally_ping_inflight_ = true;
      transport_->FetchFrom(r, ByteRange{0, 0, 0}, true, new PieceSink(this, Job{}, r, PieceSink::kTallyPing));
      did = true;
      break;
    }
  }
  // Nothing new: no outcome to work out (this runs on every turn of the progress loop, for the daemon's life once a
  // rank counts as down).
  if (!peers_changed_) return did;
  peers_changed_ = false;
  std::vector<int> down;
  for (size_t i = 0; i < peer_.size(); ++i) {
    if (peer_[i] == Peer::kWaiting) return did;
    if (peer_[i] == Peer::kDown) down.push_back(static_cast<int>(i));
  }
  if (done_everywhere() && down == down_) return did;  // nothing new since the outcome was said
  Tally t = tally_in_;
  for (size_t i = 0; i < peer_.size(); ++i) {
    if (static_cast<int>(i) == o_.rank || peer_[i] != Peer::kIn) continue;
    t.failed_ranks += tally_from_[i].failed_ranks;
    t.read_bytes += tally_from_[i].read_bytes;
    t.received_bytes += tally_from_[i].received_bytes;
    t.refetched += tally_from_[i].refetched;
    t.staged_bytes += tally_from_[i].staged_bytes;
  }
  down_ = std::move(down);
  done_all_.store(true, std::memory_order_release);
  if (on_tally) on_tally(t, down_);
  return true;
}

void Stager::Report(int64_t now) {
  if (!progress || done_here_ || now - last_report_us_ < 1000000) return;
  last_report_us_ = now;
  char line[256];
  const double sec = static_cast<double>(now - start_us_) / 1e6, mib = 1 << 20;
  const double w = static_cast<double>(written_bytes_.load()) / mib;
  const double rate = sec > 0 ? w / sec : 0.0;  // MiB/s; a slow --stage-bandwidth shows in KiB/s
  std::snprintf(line, sizeof line, "staging: %zu/%zu partitions, %.1f MiB of %.1f MiB (%.0f %s/s)", complete_,
                parts_.size(), w, static_cast<double>(total_bytes_) / mib, rate >= 1 ? rate : rate * 1024,
                rate >= 1 ? "MiB" : "KiB");
  progress(line);
}

bool Stager::Poll() {
  const int64_t now = dp::NowUs();
  bool did = reader_->PollWaits(now);
  if (done_everywhere()) {
    // The daemon's whole life after staging: nothing more to do here, unless ranks counted down may report yet.
    if (!down_.empty()) did |= PollTally(now);
    return did;
  }
  const bool turns = o_.readers > 0 && o_.readers < o_.nranks;
  if (!started_mpi_) {
    started_mpi_ = true;
    start_us_ = last_report_us_ = now;
    if (!turns || o_.rank < o_.readers) StartReads();
    else MPI_Irecv(&turn_in_, 1, MPI_BYTE, o_.rank - o_.readers, kTagTurn, o_.comm, &turn_recv_);
    if (parts_.empty()) done_here_ = true;
    ExpectTallies();
    did = true;
  }
  std::vector<Event> ev;
  {
    std::lock_guard<std::mutex> g(mu_);
    ev.swap(events_);
  }
  bool send_turn = false;
  for (const Event& e : ev) {
    did = true;
    switch (e.kind) {
      case EventKind::kRefetch: {
        ++refetched_;
        Job j = e.job;
        j.wait_us = j.not_before_us = 0;
        if (++j.tries >= kMaxRefusals) AddRead(j);
        else fetch_q_.push_front(j);
        break;
      }
      case EventKind::kComplete:
        ++complete_;
        if (on_complete) on_complete(parts_[e.job.idx].layout.part);
        if (complete_ == parts_.size()) done_here_ = true;
        break;
      case EventKind::kReadsDone: send_turn = true; break;
      case EventKind::kFailed:
        // Whoever waits for our turn must not wait for reads that will never happen.
        send_turn = true;
        done_here_ = true;
        break;
    }
  }
  if (send_turn && turns && !turn_sent_ && o_.rank + o_.readers < o_.nranks) {
    turn_sent_ = true;
    MPI_Isend(&turn_out_, 1, MPI_BYTE, o_.rank + o_.readers, kTagTurn, o_.comm, &turn_send_);
  }
  if (!have_turn_ && turn_recv_ != MPI_REQUEST_NULL) {
    if (Tested(&turn_recv_)) {
      StartReads();
      did = true;
    } else if (!ping_inflight_ && now - last_ping_us_ >= kPingUs) {
      last_ping_us_ = now;
      ping_inflight_ = true;
      transport_->FetchFrom(o_.rank - o_.readers, ByteRange{0, 0, 0}, true,
                            new PieceSink(this, Job{}, -1, PieceSink::kTurnPing));
    }
  }
  if (turn_send_ != MPI_REQUEST_NULL) Tested(&turn_send_);
  // Received pieces wait for the verifiers: no more fetches while they are behind (memory stays bounded).
  size_t queued = 0;
  if (!fetch_q_.empty() || !retry_.empty()) {
    std::lock_guard<std::mutex> g(mu_);
    queued = verify_q_.size();
  }
  while (!stop_ && inflight_ < kFetchWindow && queued + static_cast<size_t>(inflight_) < 2 * kMaxQueued) {
    Job j;
    if (!retry_.empty() && retry_.top().not_before_us <= now) {
      j = retry_.top();
      retry_.pop();
    } else if (!fetch_q_.empty()) {
      j = fetch_q_.front();
      fetch_q_.pop_front();
    } else {
      break;
    }
    const PartLayout& l = parts_[j.idx].layout;
    int from = PieceReader(l.part, j.piece, o_.replicated_part, o_.nranks, o_.replicas);
    ++inflight_;
    did = true;
    transport_->FetchFrom(from, ByteRange{l.part, l.begin(j.piece), l.length(j.piece)}, true,
                          new PieceSink(this, j, from, PieceSink::kPiece));
  }
  Report(now);
  if (done_here_ && !tally_started_) {
    tally_started_ = true;
    StartTally();
    did = true;
  }
  did |= tally_started_ ? PollTally(now) : TestTallies(now);
  return did;
}

}  // namespace fanstore::daemon
