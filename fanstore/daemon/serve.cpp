// `fanstore serve` orchestration: MPI start-up, staging with an all-ranks verdict, ready barrier, serving
// until a termination signal, then a clean stop (socket, shared memory, optionally the staged data).
#include "fanstore/serve.hpp"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "daemon_protocol.hpp"
#include "fanstore/image.hpp"
#include "fanstore/path_template.hpp"
#include "log.hpp"
#include "mpi_transport.hpp"
#include "socket_server.hpp"
#include "staging.hpp"
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
  if (nbad > 0 && ok && rank == 0) Error("%s failed on %d rank(s) (their lines say why); every rank stops", phase, nbad);
  return nbad == 0;
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

}  // namespace

int Serve(const ServeOptions& o) {
  // Blocked before MPI_Init, so every thread MPI and we start inherits the mask and only sigwait below
  // receives termination signals: no handler runs inside an MPI call or a lock.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

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
  SetLogRank(rank);
  if (provided < MPI_THREAD_SERIALIZED) {
    Error("this MPI provides thread level %d, the daemon needs MPI_THREAD_SERIALIZED", provided);
    FinalizeWithin(5, 1);
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();

  Status st;
  if (o.replicas < 1) st = Status(Code::kInvalidArgument, "--replicas must be >= 1");
  if (st.ok() && !(o.timeout_s > 0)) st = Status(Code::kInvalidArgument, "--timeout must be > 0 seconds");
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
  if (st.ok() && rank == 0)
    Info("staging %s to %s on %d ranks (%d replica%s per partition); rank 0 keeps %zu partitions", o.image.c_str(),
         o.local.c_str(), nranks, o.replicas, o.replicas == 1 ? "" : "s", plan.parts.size());
  std::function<void(const char*)> progress;
  if (rank == 0) progress = [](const char* l) { Info("%s", l); };
  // The termination signals are blocked (sigwait takes them later): during staging, look at what is pending.
  auto cancelled = [&sigs] {
    sigset_t pending;
    sigpending(&pending);
    for (int s : {SIGTERM, SIGINT, SIGHUP})
      if (sigismember(&pending, s) && sigismember(&sigs, s)) return true;
    return false;
  };
  if (st.ok()) st = Stage(o.image, local, plan, o.reserve_bytes, progress, cancelled);
  if (!st.ok()) Error("%s", st.ToString().c_str());
  if (!AllOk(st.ok(), rank, "staging")) {
    if (o.cleanup) RemoveStaged(local, plan);
    FinalizeWithin(5, 1);
    return 1;
  }

  local = Absolute(local);
  std::string socket_path = o.socket.empty() ? local + "/fanstore.sock" : Absolute(*socket_r);
  std::shared_ptr<const Image> img;
  ImageOpenOptions io;
  io.partition_dir = local;
  auto opened = Image::Open(local, io);
  if (opened.ok()) img = std::move(opened).value();
  else st = opened.status();

  DaemonStats stats;
  TransportOptions to;
  to.rank = rank;
  to.nranks = nranks;
  to.replicas = o.replicas;
  to.replicated_part = plan.replicated_part;
  to.timeout_ms = static_cast<int>(o.timeout_s * 1000);
  std::unique_ptr<MpiTransport> transport;
  std::unique_ptr<SocketServer> server;
  if (st.ok()) {
    transport = std::make_unique<MpiTransport>(img, to, &stats);
    daemon_proto::HelloInfo hello;
    hello.rank = static_cast<uint32_t>(rank);
    hello.nranks = static_cast<uint32_t>(nranks);
    hello.timeout_ms = static_cast<uint32_t>(to.timeout_ms);
    hello.index_dir = local;
    hello.partition_dir = local;
    server = std::make_unique<SocketServer>(img, transport.get(), &stats, hello);
    st = server->Bind(socket_path);
    if (!st.ok()) Error("%s", st.ToString().c_str());
  } else {
    Error("%s", st.ToString().c_str());
  }
  if (!AllOk(st.ok(), rank, "start-up")) {
    server.reset();
    if (o.cleanup) RemoveStaged(local, plan);
    FinalizeWithin(5, 1);
    return 1;
  }

  st = server->Publish();
  if (!st.ok()) Error("%s", st.ToString().c_str());
  SocketServer* srv = server.get();
  transport->SetFrontEnd([srv](int64_t us) { return srv->Poll(us); }, [srv] { srv->Wake(); });
  unsigned long long staged = plan.bytes, total = 0;
  MPI_Reduce(&staged, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);  // every rank's socket exists before rank 0 says "ready"
  transport->Start();            // from here on only the progress thread calls MPI
  if (rank == 0) {
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("fanstore serve: ready: %d ranks, %u partitions + %s, %d replica%s, %.1f MiB staged in %.1f s, "
                "socket %s\n",
                nranks, plan.regular_parts,
                plan.replicated_part != kNoPartition ? "1 replicated" : "no replicated one", o.replicas,
                o.replicas == 1 ? "" : "s", static_cast<double>(total) / (1 << 20), sec,
                o.socket.empty() ? (o.local + "/fanstore.sock").c_str() : o.socket.c_str());
    std::fflush(stdout);
  }

  int sig = 0;
  sigwait(&sigs, &sig);

  // The progress thread (which also drives the sockets) stops first and leaves MPI to us again; then every
  // client connection is closed, so clients see EIO at once, and the socket file is removed.
  transport->Stop();
  server->Stop();
  Info("stopping on %s: %s", strsignal(sig), stats.Line().c_str());
  if (o.cleanup) RemoveStaged(local, plan);
  transport.reset();
  server.reset();
  FinalizeWithin(3, 0);
  return 0;
}

}  // namespace fanstore::daemon
