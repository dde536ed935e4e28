// What fanstore-train does when an option is left out: the learning rate (scaled to the global
// batch), the warm-up, and the directory that takes the checkpoint and metrics.
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

// The checkpoint directory when --checkpoint is left out: "run-<model>-<YYYYmmdd-HHMMSS>" (local
// time) in the current directory, so runs never overwrite each other.
std::string default_run_directory(const std::string& model, std::time_t now);

}  // namespace fanstore::trainer
