// Staging in the background, while the daemon serves (docs/daemon.md, "Staging rules"): each piece of a partition
// (stage_layout.hpp) is read from the image directory by one of its holders (placement.hpp, PieceReader) and sent
// to the others over MPI, verified on arrival, written in place and served from there at once (StagedReader).
// Threads: one reads the image directory (paced by --stage-bandwidth, in ImageDirReader), two verify and write;
// everything else (fetches, turns, the tally: every MPI call) happens in Poll, on the daemon's progress thread.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fanstore/image.hpp"
#include "image_dir_reader.hpp"
#include "mpi_transport.hpp"
#include "stage_layout.hpp"
#include "staged_files.hpp"
#include "staged_reader.hpp"

namespace fanstore::daemon {

struct StagerOptions {
  int rank = 0, nranks = 1, replicas = 1;
  uint32_t replicated_part = kNoPartition;
  int readers = 0;                // --stage-readers: ranks reading the image directory at a time (0: all)
  MPI_Comm comm = MPI_COMM_NULL;  // a duplicate of the world's: the readers' turns and the tally
  int64_t corrupt_piece = -1;     // (tests: FANSTORE_TEST_CORRUPT_PIECE) damage the n-th piece received (0-based)
};

// One partition this rank stages: its pieces, and the file they are written into.
struct StagedPart {
  PartLayout layout;
  std::string tmp;         // being written here (StagedFiles knows it)
  std::string final_path;  // renamed to this when every piece is in
  int wfd = -1;            // tmp, open for writing; the Stager closes it
};

class Stager {
 public:
  struct Tally {
    uint64_t failed_ranks = 0;
    uint64_t read_bytes = 0;      // read from the image directory, by staging
    uint64_t received_bytes = 0;  // received from other ranks
    uint64_t refetched = 0;       // pieces refused by their checksums and fetched again
    uint64_t staged_bytes = 0;    // partition bytes staged, over all ranks
  };

  Stager(StagerOptions o, std::shared_ptr<const Image> index, std::vector<StagedPart> parts, StagedReader* reader,
         ImageDirReader* image_dir, MpiTransport* transport, StagedFiles* files);
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // Called on the progress thread: each partition once it has its final name; when the tally is in: once
  // every rank has reported (`down` empty), or every rank has reported or counts as down (`down` names those;
  // called again, with `down` empty, if they all report after all).
  std::function<void(uint32_t part)> on_complete;
  std::function<void(const Tally&, const std::vector<int>& down)> on_tally;
  // Rank 0's progress lines (may be empty), about once a second.
  std::function<void(const char* line)> progress;

  // Starts the threads (before the progress thread calls Poll).
  void Start();
  // The progress thread's step; true when it did anything.
  bool Poll();
  // Stops the threads (staging is cut short; what is in flight is dropped) and waits for them, at most `wait_ms`
  // (< 0: for good). False when one did not stop in time (stuck in a read of a hung shared file system): it is
  // left behind, and so must this object be (the process is on its way out). Idempotent.
  bool Stop(int64_t wait_ms = -1);

  // (progress thread) Staging here reads piece `piece` of `part` itself, soon: this rank is its reader, has its
  // turn and goes on. Then Hurry has it read next and at once, whatever --stage-bandwidth says (a reader waits
  // for it).
  bool WillRead(uint32_t part, size_t piece) const;
  void Hurry(uint32_t part, size_t piece);

  // The tally is in: every rank is done, or counts as down (down_ranks()). (The progress thread's, or after it.)
  bool done_everywhere() const { return done_all_.load(std::memory_order_acquire); }
  // Ranks known to have failed so far (this one counted once its tally is out): --strict-staging stops on the first,
  // not waiting for the tally, which a rank stuck in a hung read would hold up for ever.
  uint64_t failures_heard() const { return failures_heard_.load(std::memory_order_acquire); }
  Status status() const;
  std::vector<int> down_ranks() const { return down_; }

 private:
  class PieceSink;
  struct Job {
    uint32_t idx = 0;  // into parts_
    uint32_t piece = 0;
    bool own = false;  // one of this rank's own reads (counts for its turn), never fetched
    int tries = 0;     // times refused by its checksum
    int64_t wait_us = 0, not_before_us = 0;
  };
  struct Work {
    Job job;
    const char* data = nullptr;  // in mem (before it, so that {job, mem.get(), std::move(mem)} works)
    std::unique_ptr<char[]> mem;
    int from = -1;  // the rank it came from; -1: read here
  };
  enum class EventKind { kRefetch, kComplete, kReadsDone, kFailed };
  struct Event {
    EventKind kind;
    Job job;
  };

  void ReaderLoop();
  void VerifyLoop();
  void Post(Event e);
  void Fail(const Status& s);
  void AddRead(Job j);
  void StartReads();
  void OnPiece(const Job& j, int from, std::unique_ptr<char[]> mem, const Status& s, const char* data, uint64_t len);
  void OnPing(const Status& s);
  void OnTallyPing(int rank, const Status& s);
  void ExpectTallies();
  void StartTally();
  bool TestTallies(int64_t now_us);
  bool PollTally(int64_t now_us);
  void Report(int64_t now_us);

  StagerOptions o_;
  std::shared_ptr<const Image> index_;
  std::vector<StagedPart> parts_;
  std::unordered_map<uint32_t, uint32_t> idx_of_;     // partition id -> index into parts_
  std::unique_ptr<std::atomic<size_t>[]> remaining_;  // pieces still to write, per part
  StagedReader* reader_;
  ImageDirReader* image_dir_;
  MpiTransport* transport_;
  StagedFiles* files_;

  // Threads' side.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> read_q_;
  // Pieces a reader waits for (Hurry): read before read_q_'s and at once, whatever --stage-bandwidth says (as the
  // reader's own miss would be), cutting a paced wait short; `reading_` is the piece being read now.
  std::deque<Job> hurried_;
  std::optional<Job> reading_;
  bool rush_reading_ = false;      // (mu_) reading_ was hurried while it waited for its turn
  std::atomic<bool> rush_{false};  // a hurry came: a paced wait ends
  std::deque<Work> verify_q_;
  std::vector<Event> events_;
  Status status_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  size_t exited_ = 0;  // (mu_) of threads_
  std::atomic<uint64_t> received_bytes_{0}, written_bytes_{0};

  // Progress thread's side.
  bool started_mpi_ = false;
  std::vector<Job> own_reads_;
  size_t own_left_ = 0;  // (mu_) own reads not done yet
  bool have_turn_ = false, turn_sent_ = false, tally_started_ = false;
  MPI_Request turn_recv_ = MPI_REQUEST_NULL, turn_send_ = MPI_REQUEST_NULL;
  char turn_in_ = 0, turn_out_ = 1;
  int64_t last_ping_us_ = 0;
  bool ping_inflight_ = false;
  std::deque<Job> fetch_q_;  // pieces not asked for yet, in their readers' order
  struct Later {
    bool operator()(const Job& a, const Job& b) const { return a.not_before_us > b.not_before_us; }
  };
  std::priority_queue<Job, std::vector<Job>, Later> retry_;  // "not yet": asked again from not_before_us
  int inflight_ = 0;
  int64_t received_pieces_ = 0;
  uint64_t refetched_ = 0;
  size_t complete_ = 0;
  std::vector<bool> said_down_;  // a line said once per rank whose pieces we read ourselves
  bool done_here_ = false;       // every partition staged, or failed (status() says which)
  std::atomic<bool> done_all_{false};
  // The tally: this rank's (tally_in_) goes to every other rank once it is done; theirs come in (5 uint64_t each),
  // received from the start, so that a rank still staging hears of a failure elsewhere.
  enum class Peer : uint8_t { kWaiting, kIn, kDown };
  Tally tally_in_;
  std::vector<Tally> tally_from_;
  std::vector<MPI_Request> tally_recv_, tally_send_;
  std::vector<int> arrived_;  // MPI_Testsome's indices
  std::vector<Peer> peer_;
  bool peers_changed_ = false;  // peer_ changed since PollTally last looked: only then is the outcome worked out
  std::vector<int> down_;       // counted down when the tally came out (empty: every rank reported)
  int next_tally_ping_ = 0;     // round robin over the ranks not heard from: one ping a second in all
  bool tally_ping_inflight_ = false;
  int64_t last_tally_ping_us_ = 0;
  int64_t tally_sent_us_ = 0;        // when this rank's tally went out
  bool own_failure_counted_ = true;  // this rank's failure is in failures_heard_ (or there is none)
  std::atomic<uint64_t> failures_heard_{0};
  int64_t last_report_us_ = 0, start_us_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace fanstore::daemon
