// `fanstore serve` orchestration: MPI start-up, the --local lock, the index staged with an all-ranks verdict, the
// socket published on every rank before "ready", the partitions staged behind it (with --strict-staging: before
// it), serving until a termination signal, then a clean stop (socket, staged data with --cleanup) that cannot hang
// on a dead peer.
#include "fanstore/serve.hpp"

#include <grp.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "cache_prefault.hpp"
#include "doorbell.hpp"
#include "fanstore/env_tooling.hpp"
#include "fanstore/image.hpp"
#include "fanstore/path_template.hpp"
#include "fetch_cache.hpp"
#include "fetch_router.hpp"
#include "image_dir_reader.hpp"
#include "log.hpp"
#include "mpi_transport.hpp"
#include "partition_maps.hpp"
#include "placement.hpp"
#include "progress_loop.hpp"
#include "socket_server.hpp"
#include "staged_files.hpp"
#include "staged_reader.hpp"
#include "stager.hpp"
#include "staging.hpp"
#include "stats.hpp"

namespace fanstore::daemon {
namespace {

std::string ExpandRank(std::string s, int rank) {
  const std::string key = "{rank}";
  for (size_t p; (p = s.find(key)) != std::string::npos;) s.replace(p, key.size(), std::to_string(rank));
  return s;
}

// MPI_Finalize waits for peers; a peer that was killed must not keep us from exiting.
void FinalizeWithin(int seconds, int exit_code) {
  std::thread([seconds, exit_code] {
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    Error("MPI_Finalize did not return within %d s (a peer is gone); exiting", seconds);
    _exit(exit_code);
  }).detach();
  MPI_Finalize();
}

// Termination signals, blocked before MPI_Init so that every thread MPI and we start inherits the mask and only
// sigwait receives them: no handler runs inside an MPI call or a lock.
sigset_t BlockTerminationSignals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  // A batch system's warning before the time limit (sbatch --signal=USR1@120 reaches every task of every job step)
  // is for the job's program, which the daemon must outlive: by default it would kill the daemon, staged data left.
  signal(SIGUSR1, SIG_IGN);
  signal(SIGUSR2, SIG_IGN);
  return sigs;
}

// Termination signals during start-up, taken by a watcher thread: a peer that died leaves the main thread in a
// collective for good. Staging stops at its next step; if start-up has not ended kGraceMs after the signal, the
// watcher removes the socket and (with --cleanup) what this rank staged, and exits (docs/daemon.md, "Faults").
class StartupSignals {
 public:
  // `sigs` must be blocked in every thread. `staged`: removed on the way out when `cleanup`.
  StartupSignals(const sigset_t& sigs, StagedFiles* staged, bool cleanup)
      : sigs_(sigs), staged_(staged), cleanup_(cleanup), th_([this] { Run(); }) {}
  ~StartupSignals() { Handover(); }
  // A termination signal arrived (staging stops at its next step).
  bool signalled() const { return sig_ != 0; }
  // The socket to remove should the watcher end the process (null: none, or no longer).
  void SetSocket(SocketServer* s) {
    std::lock_guard<std::mutex> g(mu_);
    socket_ = s;
  }
  // Start-up is over: the watcher stops and the caller waits for signals itself. The signal that arrived meanwhile,
  // or 0.
  int Handover() {
    done_ = true;
    if (th_.joinable()) th_.join();
    return sig_;
  }

 private:
  // A healthy job, where every rank gets the signal, stops well within this.
  static constexpr int kGraceMs = 10000;

  void Run() {
    const timespec tick{0, 50 * 1000 * 1000};  // short waits, so that Handover returns promptly
    while (!done_ && sig_ == 0)
      if (int s = sigtimedwait(&sigs_, nullptr, &tick); s > 0) sig_ = s;
    if (sig_ == 0) return;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kGraceMs);
    while (!done_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (done_) return;  // start-up ended: the main thread handles the signal
    std::lock_guard<std::mutex> g(mu_);
    Error(
        "stopping on %s during start-up: still waiting for the other ranks after %d s (one of them died?); "
        "exiting%s",
        strsignal(sig_), kGraceMs / 1000, cleanup_ ? " and removing what this rank staged" : "");
    if (socket_) socket_->Unpublish();
    if (cleanup_) staged_->RemoveAll();
    _exit(1);
  }

  sigset_t sigs_;
  StagedFiles* staged_;
  bool cleanup_;
  std::atomic<int> sig_{0};
  std::atomic<bool> done_{false};
  std::mutex mu_;  // guards socket_, and the exit path against a concurrent SetSocket
  SocketServer* socket_ = nullptr;
  std::thread th_;  // last: it runs Run() on the members above
};

// --socket-mode / --group into permission bits and a gid.
Status SocketAccess(const ServeOptions& o, mode_t* mode, gid_t* gid) {
  *gid = static_cast<gid_t>(-1);
  if (!o.group.empty()) {
    char* end = nullptr;
    unsigned long g = std::strtoul(o.group.c_str(), &end, 10);
    if (end && *end == '\0') {
      *gid = static_cast<gid_t>(g);
    } else {
      struct group* gr = getgrnam(o.group.c_str());
      if (!gr) return Status(Code::kInvalidArgument, "--group " + o.group + ": no such group");
      *gid = gr->gr_gid;
    }
  }
  *mode = *gid != static_cast<gid_t>(-1) ? 0660 : 0600;
  if (!o.socket_mode.empty()) {
    char* end = nullptr;
    unsigned long m = std::strtoul(o.socket_mode.c_str(), &end, 8);
    if (!end || *end != '\0' || m > 0777 || !(m & 0600))
      return Status(Code::kInvalidArgument, "--socket-mode " + o.socket_mode +
                                                ": give octal permission bits that include the owner's rw, e.g. 0660");
    *mode = static_cast<mode_t>(m);
  }
  return Status::Ok();
}

// The options' own limits (the socket's access is SocketAccess's).
Status CheckOptions(const ServeOptions& o) {
  if (o.replicas < 1) return Status(Code::kInvalidArgument, "--replicas must be >= 1");
  if (o.local.empty())
    return Status(Code::kInvalidArgument,
                  "--local is empty: give a node-local directory, e.g. --local /tmp/fanstore-{rank}");
  // Whole milliseconds, at most a day: they go into ints (the transport's deadlines, the clients' hello); past 2^31
  // ms one wrapped to a negative timeout, and under 1 ms one became 0: either failed every remote read at once.
  if (!(o.timeout_s >= 0.001 && o.timeout_s <= 86400))
    return Status(Code::kInvalidArgument, "--timeout must be from 0.001 (1 ms) to 86400 seconds (a day)");
  if (!(o.prefetch_idle_s > 0)) return Status(Code::kInvalidArgument, "--prefetch-idle must be > 0 seconds");
  if (o.conn_memory < (1u << 20)) return Status(Code::kInvalidArgument, "--conn-memory must be >= 1 MiB");
  if (o.max_message < 4096 || o.max_message > (1ull << 30))
    return Status(Code::kInvalidArgument, "--max-message must be between 4096 and 1073741824 bytes");
  return Status::Ok();
}

// --cache-prefault: the fetch cache's memory faulted in before "ready" (a termination signal stops it).
void Prefault(const FetchCache& cache, uint64_t cache_bytes, const StartupSignals& startup, int rank) {
  uint64_t want = cache.arena() ? PrefaultBudget(cache_bytes) : 0, done = 0;
  if (want == 0) return;
  auto t0 = std::chrono::steady_clock::now();
  Status why = PrefaultCache(
      *cache.arena(), want, [&] { return startup.signalled(); }, &done);
  if (!why.ok())
    Error("fetch cache: %s after %.0f MiB; the rest is faulted in as it fills", why.ToString().c_str(),
          static_cast<double>(done) / (1 << 20));
  else if (rank == 0 && !startup.signalled())  // (stopped short by the signal: the daemon is on its way out)
    Info("fetch cache: %.0f MiB faulted in (%.2f s)", static_cast<double>(done) / (1 << 20),
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// This rank's doorbell (unless --no-doorbell) and every peer's address. Collective: every rank takes part, with
// or without a doorbell of its own (all zero: never rung).
std::unique_ptr<Doorbell> OpenDoorbells(bool wanted, int nranks) {
  std::unique_ptr<Doorbell> doorbell;
  if (wanted) {
    Status why;
    doorbell = Doorbell::Open(&why);
    if (!doorbell)
      Error("no doorbell (peers then see this rank's requests at its next look at MPI): %s", why.ToString().c_str());
  }
  Doorbell::Address self = doorbell ? doorbell->address() : Doorbell::Address{};
  std::vector<Doorbell::Address> all(static_cast<size_t>(nranks));
  MPI_Allgather(&self, sizeof self, MPI_BYTE, all.data(), sizeof self, MPI_BYTE, MPI_COMM_WORLD);
  if (doorbell) doorbell->SetPeers(std::move(all));
  return doorbell;
}

// The rank that speaks for staging's outcome: rank 0, or the lowest rank up when it counts as down.
int Speaker(const std::vector<int>& down) {
  int r = 0;
  while (std::find(down.begin(), down.end(), r) != down.end()) ++r;
  return r;
}

// Rank 0's "ready" line, which scripts wait for: the sockets are in place. Without --strict-staging staging goes on
// behind it, and a "staged:" line follows (`fanstore wait --staged` waits for that).
// `own_socket`: rank 0's, beside a template ({rank}, {node}) that names every rank's.
void PrintReady(const ServeOptions& o, const StagePlan& plan, int nranks, double seconds,
                const std::string& own_socket) {
  const std::string socket = o.socket.empty() ? o.local + "/fanstore.sock" : o.socket;
  std::printf("fanstore serve: ready: %d ranks, %u partitions + %s, %d replica%s, %s in %.1f s, socket %s%s\n", nranks,
              plan.regular_parts, plan.replicated_part != kNoPartition ? "1 replicated" : "no replicated one",
              o.replicas, o.replicas == 1 ? "" : "s", o.strict_staging ? "staged" : "serving while staging", seconds,
              socket.c_str(), socket == own_socket ? "" : (" (rank 0's: " + own_socket + ")").c_str());
  std::fflush(stdout);
}

// Rank 0's "staged:" line, once every rank has staged (or said that its staging failed); the line of the lowest
// rank up when some did not report (dead, or not answering).
void PrintStaged(const Stager::Tally& t, int nranks, double seconds, const std::vector<int>& down) {
  if (!down.empty()) {
    std::string ranks;
    for (int r : down) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    const bool one = down.size() == 1;
    std::printf(
        "fanstore serve: staging over on %d of %d ranks in %.1f s (%.1f MiB staged); rank%s %s did not report "
        "(dead, or not answering): %s partitions are not staged on %s and are read from the other replicas or "
        "the image directory; `fanstore wait --staged` fails at once (it passes if %s report%s after all)\n",
        nranks - static_cast<int>(down.size()), nranks, seconds, static_cast<double>(t.staged_bytes) / (1 << 20),
        one ? "" : "s", ranks.c_str(), one ? "its" : "their", one ? "its node" : "their nodes", one ? "it" : "they",
        one ? "s" : "");
    if (t.failed_ranks)
      std::printf("fanstore serve: staging failed on %llu of the others (their lines say why)\n",
                  static_cast<unsigned long long>(t.failed_ranks));
    std::fflush(stdout);
    return;
  }
  if (t.failed_ranks)
    std::printf(
        "fanstore serve: staging failed on %llu of %d ranks (their lines say why); they serve what they have and "
        "read the rest from the image directory\n",
        static_cast<unsigned long long>(t.failed_ranks), nranks);
  else
    std::printf(
        "fanstore serve: staged: %d ranks, %.1f MiB in %.1f s; %.1f MiB read from the image directory, %.1f MiB "
        "sent between ranks, %llu piece%s refetched\n",
        nranks, static_cast<double>(t.staged_bytes) / (1 << 20), seconds, static_cast<double>(t.read_bytes) / (1 << 20),
        static_cast<double>(t.received_bytes) / (1 << 20), static_cast<unsigned long long>(t.refetched),
        t.refetched == 1 ? "" : "s");
  std::fflush(stdout);
}

// One daemon, made phase by phase (Run). Members are declared in the order they are made, so they go in the reverse
// one.
class Daemon {
 public:
  explicit Daemon(const ServeOptions& o)
      : o_(o), sigs_(BlockTerminationSignals()), startup_(sigs_, &staged_files_, o.cleanup) {}

  int Run() {
    if (!InitMpi()) return 1;
    t0_ = std::chrono::steady_clock::now();
    if (!CheckAndLock()) return 1;
    if (rank_ == 0)
      Info("staging %s to %s%s on %d ranks (%d replica%s per partition); rank 0 keeps %zu partitions", o_.image.c_str(),
           o_.local.c_str(), o_.local == local_ ? "" : (" (rank 0's: " + local_ + ")").c_str(), nranks_, o_.replicas,
           o_.replicas == 1 ? "" : "s", plan_.parts.size());
    PrepareStaging();
    if (Failed("staging")) return 1;
    if (o_.cache_prefault) Prefault(*cache_, o_.cache_bytes, startup_, rank_);
    Wire();
    if (Failed("start-up")) return 1;
    int sig = 0;
    if (o_.strict_staging && !StageFirst(&sig)) return 1;
    loop_ = MakeLoop();
    if (sig == 0) {
      // "ready" only once every rank's socket is in place: a failed rename stops the job like a failed staging.
      st_ = server_->Publish();
      if (Failed("publishing the socket")) return 1;
      // Start-up is over (no collective until MPI_Finalize, which is bounded): signals are the main thread's again.
      sig = startup_.Handover();
    }
    if (!o_.strict_staging) stager_->Start();
    loop_->Start();  // from here on only the progress thread calls MPI
    if (rank_ == 0 && sig == 0) PrintReady(o_, plan_, nranks_, Seconds(), socket_);
    if (sig == 0) sigwait(&sigs_, &sig);
    return Stop(sig);
  }

 private:
  std::unique_ptr<ProgressLoop> MakeLoop() {
    return std::make_unique<ProgressLoop>(server_.get(), transport_.get(), router_.get(), stager_.get(),
                                          image_reads_.get(), o_.progress_spin);
  }

  // The progress thread never blocks in MPI, but if it ever did, the daemon exits anyway.
  void StopLoopOrExit(ProgressLoop& loop, const char* when) {
    if (loop.Stop(5000)) return;
    Error("progress thread did not stop within 5 s (%s); exiting", when);
    if (o_.cleanup) staged_files_.RemoveAll();
    _exit(1);
  }

  double Seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

  bool InitMpi() {
    int provided = 0;
    // SERIALIZED is enough: the main thread makes the start-up collectives, then only the progress thread calls MPI.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      Error("MPI_Init_thread failed (run under mpirun/srun with an MPI the daemon was built with)");
      return false;
    }
    // A peer that dies must cost its requests, not this daemon: have MPI return errors instead of aborting.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks_);
    o_.replicas = std::min(o_.replicas, nranks_);  // as placement caps it, so that the lines say what happens
    SetLogRank(rank_);
    if (provided < MPI_THREAD_SERIALIZED) {
      Error("this MPI provides thread level %d, the daemon needs MPI_THREAD_SERIALIZED", provided);
      FinalizeWithin(5, 1);
      return false;
    }
    return true;
  }

  // The options, the paths, the plan, then the lock; every rank agrees on it before anything is written: a second
  // job on a directory in use stops here, leaving the running job's files alone (and --cleanup removes nothing).
  bool CheckAndLock() {
    st_ = CheckOptions(o_);
    if (st_.ok()) st_ = SocketAccess(o_, &socket_mode_, &group_);
    // "{node}" (this node's Slurm or host name) next to "{rank}": per-node paths when nodes share a host.
    if (st_.ok()) Take(ExpandNodeTemplate(ExpandRank(o_.local, rank_)), &local_);
    if (st_.ok()) Take(ExpandNodeTemplate(ExpandRank(o_.socket, rank_)), &socket_);
    if (st_.ok()) Take(PlanStaging(o_.image, rank_, nranks_, o_.replicas), &plan_);
    AgreeOnImage();
    if (st_.ok()) Take(LockLocal(o_.image, local_, &staged_files_), &lock_fd_);
    // The socket's final path, so that one too long for a Unix socket stops the job before staging.
    char abs[PATH_MAX];
    if (st_.ok() && realpath(local_.c_str(), abs)) local_ = abs;
    if (st_.ok() && o_.socket.empty()) socket_ = local_ + "/fanstore.sock";
    if (st_.ok()) st_ = SocketServer::CheckPath(socket_);
    // With --cleanup a failure anywhere removes the --local directory this rank made (only if it made it).
    return !Failed("start-up");
  }

  // Every rank must serve one image (by any path): a rank given another would answer the peers' reads of its
  // partitions from that image's files. Collective: a rank that failed already takes part with key 0.
  void AgreeOnImage() {
    const uint64_t mine = st_.ok() ? plan_.content_key : 0;
    uint64_t first = mine;
    MPI_Bcast(&first, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (st_.ok() && first != 0 && mine != first) {
      char keys[64];
      std::snprintf(keys, sizeof keys, "%016" PRIx64 " here, %016" PRIx64 " on rank 0", mine, first);
      // (Were rank 0's the odd one, every other rank says this: the lines then name the one that differs.)
      st_ = Status(Code::kInvalidArgument, "--image " + o_.image + " is not the image rank 0 serves (content key " +
                                               keys + "): give every rank the same image");
    }
  }

  // The value of `r` into *out, or its error into st_.
  template <class T, class U>
  void Take(Result<T> r, U* out) {
    if (r.ok()) *out = std::move(r).value();
    else st_ = r.status();
  }

  // After the lock: every rank says whether `phase` worked; on any failure all stop, removing what they staged
  // (rank 0 says so, whether it failed itself or not).
  bool Failed(const char* phase) {
    if (!st_.ok()) Error("%s", st_.ToString().c_str());
    int bad = st_.ok() ? 0 : 1, nbad = 0;
    MPI_Allreduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (nbad == 0) return false;
    if (rank_ == 0 && (st_.ok() || nranks_ > 1))  // (a job of one rank: its own line is the whole story)
      Error("%s failed on %d rank(s) (their lines say why); every rank stops", phase, nbad);
    Abort();
    return true;
  }

  // Every rank stops at start-up: the socket goes, what was staged too with --cleanup, and MPI ends.
  void Abort() {
    startup_.SetSocket(nullptr);
    StopStaging("every rank stopping");
    if (image_reads_) image_reads_->Stop();  // no wake-up of the server after it went
    // First: failing its pending fetches calls into the router and the server, which go before it.
    if (transport_) transport_->Shutdown();
    server_.reset();
    if (o_.cleanup) staged_files_.RemoveAll();
    if (lock_fd_ >= 0) close(lock_fd_);
    FinalizeWithin(5, 1);
  }

  // The fetch cache, the index (served from while the partitions are staged behind it) and each partition's file,
  // allocated.
  void PrepareStaging() {
    Status why;
    cache_ = std::make_unique<FetchCache>(o_.cache_bytes, &why);
    if (!why.ok()) Error("no fetch cache: %s", why.ToString().c_str());
    st_ = CheckSpace(local_, plan_, o_.reserve_bytes);
    if (st_.ok()) st_ = StageIndex(o_.image, local_, &staged_files_);
    ImageOpenOptions io;
    io.partition_dir = local_;
    if (st_.ok()) Take(Image::Open(local_, io), &img_);
    if (!st_.ok()) return;
    image_dir_ = std::make_shared<ImageDirReader>(plan_.sources, o_.stage_bandwidth);
    // Clients' and peers' reads of the image directory, off the progress thread, which they wake when done (the
    // server is made before any read starts; ImageDirReads::Stop ends the wake-ups before it goes).
    image_reads_ = std::make_unique<ImageDirReads>(image_dir_, [this] { server_->Wake(); });
    staged_ = std::make_unique<StagedReader>(img_->PartitionCount());
    Take(PrepareParts(*img_, plan_, o_.piece_bytes, &staged_files_, staged_.get()), &parts_);
  }

  // Doorbells, the MPI transport, the socket server, the router between them and the stager; then the socket is
  // bound (published later).
  void Wire() {
    doorbell_ = OpenDoorbells(o_.doorbell, nranks_);
    // The transport's chunks of big replies, and staging, travel on communicators of their own.
    MPI_Comm chunk_comm = MPI_COMM_NULL, stage_comm = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &chunk_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &stage_comm);
    if (o_.mapped_send_min > 0) maps_ = std::make_unique<PartitionMaps>(*img_);
    const TransportOptions to{.rank = rank_,
                              .nranks = nranks_,
                              .replicas = o_.replicas,
                              .replicated_part = plan_.replicated_part,
                              .timeout_ms = static_cast<int>(o_.timeout_s * 1000),
                              .max_message = o_.max_message,
                              .chunk_comm = chunk_comm,
                              .doorbell = doorbell_.get(),
                              .maps = maps_.get(),
                              .mapped_send_min = o_.mapped_send_min,
                              .image_dir = image_reads_.get()};
    transport_ = std::make_unique<MpiTransport>(staged_.get(), to, &stats_);
    const ServerOptions so{.hello = {.rank = static_cast<uint32_t>(rank_),
                                     .nranks = static_cast<uint32_t>(nranks_),
                                     .timeout_ms = static_cast<uint32_t>(to.timeout_ms),
                                     .index_dir = local_,
                                     .partition_dir = local_,
                                     .unstaged = {}},
                           .partitions = img_->PartitionCount(),
                           .area_max = o_.conn_memory,
                           .socket_mode = socket_mode_,
                           .group = group_,
                           .max_hint_paths = 4 * img_->size() + 1024,
                           .cache_fd = cache_->shared_fd()};
    server_ = std::make_unique<SocketServer>(so, &stats_);
    const RouterOptions ro{.prefetch_window = o_.prefetch_window ? o_.prefetch_window : o_.cache_bytes / 2,
                           .max_hinted = so.max_hint_paths,
                           .prefetch_idle_us = static_cast<int64_t>(o_.prefetch_idle_s * 1e6),
                           .piece_reader =
                               [rank = rank_, nranks = nranks_, replicas = o_.replicas, rep = plan_.replicated_part](
                                   uint32_t part, size_t piece) {
                                 int r = PieceReader(part, piece, rep, nranks, replicas);
                                 return r == rank ? -1 : r;
                               },
                           .timeout_us = static_cast<int64_t>(o_.timeout_s * 1e6)};
    router_ = std::make_unique<FetchRouter>(img_, staged_.get(), transport_.get(), cache_.get(), server_.get(), &stats_,
                                            ro, image_reads_.get());
    server_->SetHandler(router_.get());
    MakeStager(stage_comm);
    startup_.SetSocket(server_.get());
    st_ = server_->Bind(socket_);
    if (st_.ok() && doorbell_)
      server_->Watch(doorbell_->fd(), [this] {
        stats_.doorbells_heard.fetch_add(static_cast<uint64_t>(doorbell_->Drain()), std::memory_order_relaxed);
      });
  }

  void MakeStager(MPI_Comm stage_comm) {
    StagerOptions sto{.rank = rank_,
                      .nranks = nranks_,
                      .replicas = o_.replicas,
                      .replicated_part = plan_.replicated_part,
                      .readers = o_.stage_readers,
                      .comm = stage_comm};
    if (const char* c = getenv(env::kTestCorruptPiece)) sto.corrupt_piece = std::atoll(c);
    stager_ = std::make_unique<Stager>(sto, img_, std::move(parts_), staged_.get(), image_dir_.get(), transport_.get(),
                                       &staged_files_);
    if (maps_) stager_->on_complete = [m = maps_.get()](uint32_t part) { m->Map(part); };
    stager_->on_tally = [this](const Stager::Tally& t, const std::vector<int>& down) {
      if (down.empty()) server_->SetStaged(t.failed_ranks > 0);
      else server_->SetUnstaged(down);
      // --strict-staging stops every rank on a failure (StageFirst says so): no line that they go on serving.
      const bool strict_stop = o_.strict_staging && (t.failed_ranks > 0 || !down.empty());
      if (rank_ == Speaker(down) && !strict_stop) PrintStaged(t, nranks_, Seconds(), down);
    };
    if (rank_ == 0) stager_->progress = [](const char* l) { Info("%s", l); };
    // A reader of a piece this rank stages next waits for it, up to a fifth of --timeout (an asking daemon gives
    // each of up to 4 holders 22% of it), instead of reading the image directory twice.
    Stager* sg = stager_.get();
    staged_->SetWaits(
        static_cast<int64_t>(o_.timeout_s * 200000),
        [sg](uint32_t part, size_t piece) { return sg->WillRead(part, piece); },
        [sg](uint32_t part, size_t piece) { sg->Hurry(part, piece); });
  }

  // --strict-staging: the socket appears once every rank has staged and verified everything, and a failure
  // anywhere stops every rank. The progress thread stages (it alone calls MPI meanwhile). False: the daemon stopped.
  bool StageFirst(int* sig) {
    stager_->Start();
    auto loop = MakeLoop();
    loop->Start();
    while (!stager_->done_everywhere() && stager_->failures_heard() == 0 && !startup_.signalled())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    StopLoopOrExit(*loop, "after staging");
    if (startup_.signalled()) {
      *sig = startup_.Handover();
      return true;
    }
    const std::vector<int> down = stager_->down_ranks();
    st_ = stager_->status();
    // (This rank's own failure reaches failures_heard() only once its tally is out: count it from its status.)
    const uint64_t failed = std::max<uint64_t>(stager_->failures_heard(), st_.ok() ? 0 : 1);
    if (failed == 0 && down.empty()) return true;  // (a failure of this rank's own was said by the stager)
    if (rank_ == Speaker(down))
      Error("staging failed on %s%llu rank(s) (their lines say why)%s; every rank stops (--strict-staging)",
            stager_->done_everywhere() ? "" : "at least ", static_cast<unsigned long long>(failed),
            down.empty() ? "" : (", and " + std::to_string(down.size()) + " did not report (dead?)").c_str());
    Abort();
    return false;
  }

  // Stops staging's threads. One whose read of the image directory hangs (a hung shared file system) is left
  // behind after 2 s, with what it uses, as the process exits: in time for the other ranks' MPI_Finalize, which
  // waits for this rank's up to 3 s (5 at start-up).
  void StopStaging(const char* when) {
    if (!stager_ || stager_->Stop(2000)) return;
    Error("staging's read of the image directory did not return within 2 s of %s; leaving it behind", when);
    (void)stager_.release();
    (void)new std::shared_ptr<ImageDirReader>(image_dir_);
  }

  // The socket goes first, so no client connects to a daemon on its way out and nothing stale is left even if the
  // rest were to hang; then the progress thread and staging stop, and every client connection is closed (clients
  // see EIO at once).
  int Stop(int sig) {
    server_->Unpublish();
    StopLoopOrExit(*loop_, strsignal(sig));
    image_reads_->Stop();  // a read stuck in a hung shared file system is left to its thread
    StopStaging(strsignal(sig));
    transport_->Shutdown();
    server_->Stop();
    router_->Settle();
    if (doorbell_) stats_.doorbells_rung = doorbell_->rung();
    Info("stopping on %s: %s; %llu bytes read from the image directory by staging, %llu for readers", strsignal(sig),
         stats_.Line().c_str(), static_cast<unsigned long long>(image_dir_->staging_bytes()),
         static_cast<unsigned long long>(image_dir_->reader_bytes()));
    if (o_.cleanup) staged_files_.RemoveAll();
    router_.reset();
    server_.reset();
    transport_.reset();
    stager_.reset();
    close(lock_fd_);
    FinalizeWithin(3, 0);
    return 0;
  }

  ServeOptions o_;  // a copy: --replicas is capped at the rank count
  sigset_t sigs_;
  StagedFiles staged_files_;
  StartupSignals startup_;
  int rank_ = 0, nranks_ = 1;
  std::chrono::steady_clock::time_point t0_;
  Status st_;  // the current phase's verdict
  mode_t socket_mode_ = 0600;
  gid_t group_ = static_cast<gid_t>(-1);
  std::string local_, socket_;
  StagePlan plan_;
  int lock_fd_ = -1;
  std::unique_ptr<SocketServer> server_;
  std::unique_ptr<FetchCache> cache_;
  std::shared_ptr<const Image> img_;
  std::shared_ptr<ImageDirReader> image_dir_;
  std::unique_ptr<ImageDirReads> image_reads_;
  std::unique_ptr<StagedReader> staged_;
  std::vector<StagedPart> parts_;
  std::unique_ptr<Doorbell> doorbell_;
  DaemonStats stats_;
  // Destroyed after MPI_Finalize (declared before the transport): a send from a mapping may be in flight until then.
  std::unique_ptr<PartitionMaps> maps_;
  std::unique_ptr<MpiTransport> transport_;
  std::unique_ptr<FetchRouter> router_;
  std::unique_ptr<Stager> stager_;
  std::unique_ptr<ProgressLoop> loop_;
};

}  // namespace

int Serve(const ServeOptions& o) {
  Daemon d(o);
  return d.Run();
}

}  // namespace fanstore::daemon
