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
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "cache_prefault.hpp"
#include "daemon_protocol.hpp"
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
#include "startup_signals.hpp"
#include "stats.hpp"

namespace fanstore::daemon {
namespace {

std::string ExpandRank(std::string s, int rank) {
  const std::string key = "{rank}";
  for (size_t p; (p = s.find(key)) != std::string::npos;) s.replace(p, key.size(), std::to_string(rank));
  return s;
}

std::string Absolute(const std::string& p) {
  char buf[PATH_MAX];
  if (realpath(p.c_str(), buf)) return buf;
  return p;
}

// Agrees across ranks: true when every rank's `ok` is true. Ranks that were fine say why they stop.
bool AllOk(bool ok, int rank, const char* phase) {
  int bad = ok ? 0 : 1, nbad = 0;
  MPI_Allreduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (nbad > 0 && ok && rank == 0)
    Error("%s failed on %d rank(s) (their lines say why); every rank stops", phase, nbad);
  return nbad == 0;
}

// After a termination signal during start-up, how long the watcher lets the main thread reach its own exit before
// it ends the process itself (stuck in a collective with a dead peer). A healthy job, where every rank gets the
// signal, stops within a fraction of this.
constexpr int kStartupGraceMs = 10000;

// MPI_Finalize waits for peers; a peer that was killed must not keep us from exiting.
void FinalizeWithin(int seconds, int exit_code) {
  std::thread([seconds, exit_code] {
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    Error("MPI_Finalize did not return within %d s (a peer is gone); exiting", seconds);
    _exit(exit_code);
  }).detach();
  MPI_Finalize();
}

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

// Each connection is an fd: allow as many as the hard limit lets us.
void RaiseFdLimit() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// The options' own limits (the socket's access is SocketAccess's).
Status CheckOptions(const ServeOptions& o) {
  if (o.replicas < 1) return Status(Code::kInvalidArgument, "--replicas must be >= 1");
  if (!(o.timeout_s > 0)) return Status(Code::kInvalidArgument, "--timeout must be > 0 seconds");
  if (!(o.prefetch_idle_s > 0)) return Status(Code::kInvalidArgument, "--prefetch-idle must be > 0 seconds");
  if (o.conn_memory < (1u << 20)) return Status(Code::kInvalidArgument, "--conn-memory must be >= 1 MiB");
  if (o.max_message < 4096 || o.max_message > (1ull << 30))
    return Status(Code::kInvalidArgument, "--max-message must be between 4096 and 1073741824 bytes");
  return Status::Ok();
}

// Waits for --cache-prefault's faulting to end (a termination signal meanwhile stops it at its next step: a big
// cache takes seconds) and says how far it got.
void FinishPrefault(CachePrefault& prefault, StartupSignals& startup, int rank) {
  while (!prefault.Finished()) {
    if (startup.signalled()) prefault.Stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  uint64_t done = 0;
  double sec = 0;
  Status why = prefault.Wait(&done, &sec);
  if (!why.ok())
    Error("fetch cache: %s after %.0f MiB; the rest is faulted in as it fills", why.ToString().c_str(),
          static_cast<double>(done) / (1 << 20));
  else if (rank == 0)
    Info("fetch cache: %.0f MiB faulted in (%.2f s, while staging)", static_cast<double>(done) / (1 << 20), sec);
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
  static_assert(sizeof(Doorbell::Address) == 8);
  MPI_Allgather(&self, 8, MPI_BYTE, all.data(), 8, MPI_BYTE, MPI_COMM_WORLD);
  if (doorbell) doorbell->SetPeers(std::move(all));
  return doorbell;
}

// Rank 0's "ready" line, which scripts wait for: the sockets are in place. Without --strict-staging staging goes on
// behind it, and a "staged:" line follows (`fanstore wait --staged` waits for that).
void PrintReady(const ServeOptions& o, const StagePlan& plan, int nranks, bool staged, double seconds) {
  std::printf("fanstore serve: ready: %d ranks, %u partitions + %s, %d replica%s, %s in %.1f s, socket %s\n", nranks,
              plan.regular_parts, plan.replicated_part != kNoPartition ? "1 replicated" : "no replicated one",
              o.replicas, o.replicas == 1 ? "" : "s", staged ? "staged" : "serving while staging", seconds,
              o.socket.empty() ? (o.local + "/fanstore.sock").c_str() : o.socket.c_str());
  std::fflush(stdout);
}

}  // namespace

int Serve(const ServeOptions& o) {
  // Blocked before MPI_Init, so every thread MPI and we start inherits the mask and only sigwait receives
  // termination signals: no handler runs inside an MPI call or a lock. Until start-up is over a watcher thread
  // takes them (the main thread may wait in a collective for a peer that died); then the main thread.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  StagedFiles staged_files;
  StartupSignals startup(sigs, &staged_files, o.cleanup, kStartupGraceMs);

  int provided = 0;
  // SERIALIZED is enough: the main thread makes the start-up collectives, then only the progress thread calls MPI.
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    Error("MPI_Init_thread failed (run under mpirun/srun with an MPI the daemon was built with)");
    return 1;
  }
  // A peer that dies must cost its requests, not this daemon: have MPI return errors instead of aborting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  // Collective, so here where every rank passes: the transport's chunks of big replies travel on their own.
  MPI_Comm chunk_comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &chunk_comm);
  SetLogRank(rank);
  if (provided < MPI_THREAD_SERIALIZED) {
    Error("this MPI provides thread level %d, the daemon needs MPI_THREAD_SERIALIZED", provided);
    FinalizeWithin(5, 1);
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  RaiseFdLimit();

  Status st;
  mode_t socket_mode = 0600;
  gid_t group = static_cast<gid_t>(-1);
  st = CheckOptions(o);
  if (st.ok()) st = SocketAccess(o, &socket_mode, &group);
  // "{node}" (this node's Slurm or host name) next to "{rank}": per-node paths when nodes share a host.
  auto local_r = ExpandNodeTemplate(ExpandRank(o.local, rank));
  auto socket_r = ExpandNodeTemplate(ExpandRank(o.socket, rank));
  if (st.ok()) st = local_r.ok() ? socket_r.status() : local_r.status();
  std::string local = local_r.ok() ? *local_r : o.local;
  StagePlan plan;
  if (st.ok()) {
    auto p = PlanStaging(o.image, rank, nranks, o.replicas);
    if (p.ok()) plan = std::move(p).value();
    else st = p.status();
  }
  // The lock comes first and every rank agrees on it before anything is written: a second job on a directory in
  // use stops here, leaving the running job's files alone (and --cleanup removes nothing).
  int lock_fd = -1;
  if (st.ok()) {
    auto l = LockLocal(o.image, local, &staged_files);
    if (l.ok()) lock_fd = *l;
    else st = l.status();
  }
  if (!st.ok()) Error("%s", st.ToString().c_str());
  if (!AllOk(st.ok(), rank, "start-up")) {
    if (lock_fd >= 0) close(lock_fd);
    FinalizeWithin(5, 1);
    return 1;
  }
  if (rank == 0)
    Info("staging %s to %s on %d ranks (%d replica%s per partition); rank 0 keeps %zu partitions", o.image.c_str(),
         o.local.c_str(), nranks, o.replicas, o.replicas == 1 ? "" : "s", plan.parts.size());
  std::unique_ptr<SocketServer> server;
  // After the lock: every rank says whether `phase` worked; on any failure all stop, removing what they staged.
  auto failed = [&](const char* phase) {
    if (!st.ok()) Error("%s", st.ToString().c_str());
    if (AllOk(st.ok(), rank, phase)) return false;
    startup.SetSocket(nullptr);
    server.reset();
    if (o.cleanup) staged_files.RemoveAll();
    close(lock_fd);
    FinalizeWithin(5, 1);
    return true;
  };
  // The fetch cache exists before staging: with --cache-prefault its memory is faulted in on a thread of its own
  // while the daemon sets up, and the daemon is ready once that is done (cache_prefault.hpp).
  std::unique_ptr<FetchCache> cache;
  std::unique_ptr<CachePrefault> prefault;
  {
    Status why;
    cache = std::make_unique<FetchCache>(o.cache_bytes, &why);
    if (!why.ok()) Error("no fetch cache: %s", why.ToString().c_str());
    uint64_t want = o.cache_prefault && cache->arena() ? PrefaultBudget(o.cache_bytes) : 0;
    if (want > 0) prefault = std::make_unique<CachePrefault>(cache->arena(), want);
  }
  // The index first: the daemon serves from it while the partitions are staged behind it.
  st = CheckSpace(o.image, local, plan, o.reserve_bytes);
  if (st.ok()) st = StageIndex(o.image, local, &staged_files);
  local = Absolute(local);
  std::string socket_path = o.socket.empty() ? local + "/fanstore.sock" : Absolute(*socket_r);
  std::shared_ptr<const Image> img;
  std::unique_ptr<ImageDirReader> image_dir;
  std::unique_ptr<StagedReader> staged;
  std::vector<StagedPart> parts;
  if (st.ok()) {
    ImageOpenOptions io;
    io.partition_dir = local;
    auto opened = Image::Open(local, io);
    if (opened.ok()) img = std::move(opened).value();
    else st = opened.status();
  }
  if (st.ok()) {
    std::vector<std::string> sources;
    for (uint32_t p = 0; p < img->PartitionCount(); ++p) {
      std::string name = img->PartitionPath(p);
      sources.push_back(o.image + "/" + name.substr(name.rfind('/') + 1));
    }
    image_dir = std::make_unique<ImageDirReader>(std::move(sources), o.stage_bandwidth);
    staged = std::make_unique<StagedReader>(img->PartitionCount(), image_dir.get());
    auto made = PrepareParts(o.image, local, *img, plan, o.piece_bytes, &staged_files, staged.get());
    if (made.ok()) parts = std::move(made).value();
    else st = made.status();
  }
  if (!st.ok() && prefault) prefault->Stop();
  if (failed("staging")) return 1;
  if (prefault) FinishPrefault(*prefault, startup, rank);
  prefault.reset();

  std::unique_ptr<Doorbell> doorbell = OpenDoorbells(o.doorbell, nranks);
  MPI_Comm stage_comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &stage_comm);

  DaemonStats stats;
  // Destroyed after MPI_Finalize (declared before the transport): a send from a mapping may be in flight until then.
  std::unique_ptr<PartitionMaps> maps;
  std::unique_ptr<MpiTransport> transport;
  std::unique_ptr<FetchRouter> router;
  std::unique_ptr<Stager> stager;
  {
    if (o.mapped_send_min > 0) maps = std::make_unique<PartitionMaps>(*img);
    TransportOptions to;
    to.rank = rank;
    to.nranks = nranks;
    to.replicas = o.replicas;
    to.replicated_part = plan.replicated_part;
    to.timeout_ms = static_cast<int>(o.timeout_s * 1000);
    to.max_message = o.max_message;
    to.chunk_comm = chunk_comm;
    to.doorbell = doorbell.get();
    to.maps = maps.get();
    to.mapped_send_min = o.mapped_send_min;
    transport = std::make_unique<MpiTransport>(staged.get(), to, &stats);
    ServerOptions so;
    so.hello.rank = static_cast<uint32_t>(rank);
    so.hello.nranks = static_cast<uint32_t>(nranks);
    so.hello.timeout_ms = static_cast<uint32_t>(to.timeout_ms);
    so.hello.index_dir = local;
    so.hello.partition_dir = local;
    so.partitions = img->PartitionCount();
    so.area_max = o.conn_memory;
    so.socket_mode = socket_mode;
    so.group = group;
    so.max_hint_paths = 4 * img->size() + 1024;
    so.cache_fd = cache->shared_fd();
    server = std::make_unique<SocketServer>(so, &stats);
    RouterOptions ro;
    ro.prefetch_window = o.prefetch_window ? o.prefetch_window : o.cache_bytes / 2;
    ro.max_hinted = so.max_hint_paths;
    ro.prefetch_idle_us = static_cast<int64_t>(o.prefetch_idle_s * 1e6);
    ro.piece_reader = [rank, nranks, &o, rep = plan.replicated_part](uint32_t part, size_t piece) {
      int r = PieceReader(part, piece, rep, nranks, o.replicas);
      return r == rank ? -1 : r;
    };
    router = std::make_unique<FetchRouter>(img, staged.get(), transport.get(), cache.get(), server.get(), &stats, ro,
                                           image_dir.get());
    server->SetHandler(router.get());
    StagerOptions sto;
    sto.rank = rank;
    sto.nranks = nranks;
    sto.replicas = o.replicas;
    sto.replicated_part = plan.replicated_part;
    sto.readers = o.stage_readers;
    sto.comm = stage_comm;
    if (const char* c = getenv(env::kTestCorruptPiece)) sto.corrupt_piece = std::atoll(c);
    stager = std::make_unique<Stager>(sto, img, std::move(parts), staged.get(), image_dir.get(), transport.get(),
                                      &staged_files);
    SocketServer* srv = server.get();
    PartitionMaps* mp = maps.get();
    stager->on_complete = [mp](uint32_t part) {
      if (mp) mp->Map(part);
    };
    stager->on_tally = [srv, rank, nranks, t0](const Stager::Tally& t) {
      srv->SetStaged();
      if (rank != 0) return;
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (t.failed_ranks)
        std::printf(
            "fanstore serve: staging failed on %llu of %d ranks (their lines say why); they serve what they "
            "have and read the rest from the image directory\n",
            static_cast<unsigned long long>(t.failed_ranks), nranks);
      else
        std::printf(
            "fanstore serve: staged: %d ranks, %.1f MiB in %.1f s; %.1f MiB read from the image directory, "
            "%.1f MiB sent between ranks, %llu piece%s refetched\n",
            nranks, static_cast<double>(t.staged_bytes) / (1 << 20), sec, static_cast<double>(t.read_bytes) / (1 << 20),
            static_cast<double>(t.received_bytes) / (1 << 20), static_cast<unsigned long long>(t.refetched),
            t.refetched == 1 ? "" : "s");
      std::fflush(stdout);
    };
    if (rank == 0) stager->progress = [](const char* l) { Info("%s", l); };
    // A reader of a piece this rank stages next waits for it, up to a fifth of --timeout (an asking daemon gives
    // each of up to 4 holders 22% of it), instead of reading the image directory twice.
    Stager* sg = stager.get();
    staged->SetWaits(
        static_cast<int64_t>(o.timeout_s * 200000),
        [sg](uint32_t part, size_t piece) { return sg->WillRead(part, piece); },
        [sg](uint32_t part, size_t piece) { sg->Hurry(part, piece); });
    startup.SetSocket(server.get());
    st = server->Bind(socket_path);
    if (st.ok() && doorbell)
      server->Watch(doorbell->fd(), [&doorbell, &stats] {
        stats.doorbells_heard.fetch_add(static_cast<uint64_t>(doorbell->Drain()), std::memory_order_relaxed);
      });
  }
  if (failed("start-up")) return 1;
  LoopOptions lo;
  lo.spin = o.progress_spin;
  auto loop = std::make_unique<ProgressLoop>(server.get(), transport.get(), router.get(), stager.get(), lo);
  int sig = 0;
  if (o.strict_staging) {
    // Today's all-or-nothing rule: the socket appears once every rank has staged and verified everything, and a
    // failure anywhere stops every rank. The progress thread stages (it alone calls MPI meanwhile).
    stager->Start();
    loop->Start();
    while (!stager->done_everywhere() && !startup.signalled())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!loop->Stop(5000)) {
      Error("progress thread did not stop within 5 s; exiting");
      if (o.cleanup) staged_files.RemoveAll();
      _exit(1);
    }
    if (startup.signalled()) {
      sig = startup.Handover();
    } else if (stager->tally().failed_ranks > 0) {
      st = stager->status();
      if (!st.ok()) Error("%s", st.ToString().c_str());
      if (rank == 0)
        Error("staging failed on %llu rank(s) (their lines say why); every rank stops (--strict-staging)",
              static_cast<unsigned long long>(stager->tally().failed_ranks));
      stager->Stop();
      transport->Shutdown();
      startup.SetSocket(nullptr);
      server.reset();
      if (o.cleanup) staged_files.RemoveAll();
      close(lock_fd);
      FinalizeWithin(5, 1);
      return 1;
    }
    loop = std::make_unique<ProgressLoop>(server.get(), transport.get(), router.get(), stager.get(), lo);
  }
  if (sig == 0) {
    // "ready" only once every rank's socket is in place: a failed rename stops the job like a failed staging.
    st = server->Publish();
    if (failed("publishing the socket")) return 1;
    // Start-up is over (no collective until MPI_Finalize, which is bounded): signals are the main thread's again.
    sig = startup.Handover();
  }
  if (!o.strict_staging) stager->Start();
  loop->Start();  // from here on only the progress thread calls MPI
  if (rank == 0 && sig == 0)
    PrintReady(o, plan, nranks, o.strict_staging,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  if (sig == 0) sigwait(&sigs, &sig);

  // The socket goes first, so no client connects to a daemon on its way out and nothing stale is left even if the
  // rest were to hang; then the progress thread stops (it never blocks in MPI, but if it ever did, exit anyway),
  // staging stops, every client connection is closed (clients see EIO at once).
  server->Unpublish();
  if (!loop->Stop(5000)) {
    Error("progress thread did not stop within 5 s on %s; exiting", strsignal(sig));
    if (o.cleanup) staged_files.RemoveAll();
    _exit(1);
  }
  stager->Stop();
  transport->Shutdown();
  server->Stop();
  router->Settle();
  if (doorbell) stats.doorbells_rung = doorbell->rung();
  Info("stopping on %s: %s; %llu bytes read from the image directory by staging, %llu for readers", strsignal(sig),
       stats.Line().c_str(), static_cast<unsigned long long>(image_dir->staging_bytes()),
       static_cast<unsigned long long>(image_dir->reader_bytes()));
  if (o.cleanup) staged_files.RemoveAll();
  router.reset();
  server.reset();
  transport.reset();
  stager.reset();
  close(lock_fd);
  FinalizeWithin(3, 0);
  return 0;
}

}  // namespace fanstore::daemon
