// What fanstore-train does when an option is left out: the learning rate (scaled to the global
// batch), the warm-up, the decoding threads, and the directory that takes the checkpoint and metrics.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

namespace fanstore::trainer {

// --lr when none is given: SGD 0.1 x global_batch / 256 (Goyal et al., "Accurate, Large Minibatch
// SGD", linear scaling with ImageNet's 0.1 at 256), Adam 1e-3 (torch.optim.Adam's default; Adam's
// step does not grow with the batch). LARS has no batch-independent default (its rate depends on
// the trust coefficient and the schedule): throws std::invalid_argument asking for --lr.
double default_learning_rate(const std::string& optimizer, std::int64_t global_batch);

// --warmup-epochs when none is given: a linear warm-up over 10% of the run, at most 5 epochs
// (Goyal et al. warm up for 5 of 90 epochs), so the scaled rate is reached gradually.
double default_warmup_epochs(int epochs);

// --prefetch-threads 0 (the default): on the CPU 2, since the compute threads take the cores; on a GPU
// this rank's share of the node's cores less the one that drives the GPU, at least 2 and at most 32.
// The share: the CPUs the rank may run on (sched_getaffinity), divided by the ranks on the node
// (`node_local_ranks`, -1: unknown) when the rank is not bound to a part of the node.
// `requested` > 0 is taken as it is.
int decode_threads(int requested, bool gpu, int affinity_cpus, int online_cpus, int node_local_ranks);
// The same for this process: its affinity, the online CPUs and node_local_ranks() (device_selection.hpp).
int decode_threads(int requested, bool gpu);

// The checkpoint directory when --checkpoint is left out: "run-<model>-<YYYYmmdd-HHMMSS>" (local
// time) in the current directory, so runs never overwrite each other.
std::string default_run_directory(const std::string& model, std::time_t now);

}  // namespace fanstore::trainer
