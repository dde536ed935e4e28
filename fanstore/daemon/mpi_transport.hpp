// Daemon-to-daemon transport: one progress thread owns every MPI call after start-up, serves peers'
// requests from the local partitions and fetches remote stored bytes with deadlines and replica failover.
// The same thread drives the client socket front end (SetFrontEnd), so a fetch crosses no thread boundary.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "fanstore/image.hpp"
#include "fanstore/status.hpp"
#include "payload.hpp"
#include "stats.hpp"

namespace fanstore::daemon {

struct TransportOptions {
  int rank = 0, nranks = 1;
  int replicas = 1;
  uint32_t replicated_part = kNoPartition;
  int timeout_ms = 5000;  // total budget of one fetch over all replicas
};

class MpiTransport {
 public:
  // Called on the progress thread with the stored bytes or the reason they could not be had.
  using Done = std::function<void(Status, Payload)>;

  MpiTransport(std::shared_ptr<const Image> image, TransportOptions opts, DaemonStats* stats);
  ~MpiTransport();
  // `poll(timeout_us)` handles client I/O, waiting at most timeout_us for some (0: just look); true when it did
  // anything. `wake()` interrupts a poll in progress (for Stop). Without a front end the thread waits on a cv.
  void SetFrontEnd(std::function<bool(int64_t timeout_us)> poll, std::function<void()> wake);
  void Start();  // after MPI_Init and the start-up collectives: from now on only the progress thread calls MPI
  void Stop();   // answers pending fetches with an error, cancels what can be cancelled, joins

  // Thread-safe. Fetches entry `id` from the holders of its partition other than this rank, in ReadOrder;
  // `done` is called exactly once, within the timeout.
  void Fetch(uint32_t id, Done done);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fanstore::daemon
