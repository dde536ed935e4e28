// A DLIO-style training loop: reader threads prefetch whole batches, the "accelerator" sleeps a fixed time per batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fanstore::bench {

struct DlioConfig {
  std::vector<std::string> samples;  // one file per sample (npz / JPEG / tfrecord-record emulation)
  size_t batch = 1;
  int threads = 4;       // DLIO reader.read_threads
  int prefetch = 2;      // batches ready ahead of the accelerator, per reader thread (PyTorch prefetch_factor)
  double compute_s = 0;  // DLIO train.computation_time per batch; 0 measures the pure I/O rate
  int epochs = 1;
  uint64_t seed = 42;      // file order is a seeded shuffle per epoch, identical for every system compared
  size_t block = 4 << 20;  // read(2) size
};

struct DlioResult {
  uint64_t samples = 0, batches = 0, bytes = 0;
  double seconds = 0, compute_seconds = 0;
  std::string error;  // non-empty when a read failed
};

// Runs the loop; incomplete final batches are dropped, as DLIO does.
DlioResult RunDlio(const DlioConfig& config);

}  // namespace fanstore::bench
