// Defaults of a training run: scaled learning rate, warm-up length, run directory name.
#include "trainer/run_defaults.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "trainer/device_selection.hpp"

namespace fanstore::trainer {

double default_learning_rate(const std::string& optimizer, std::int64_t global_batch) {
  if (optimizer == "sgd") return 0.1 * static_cast<double>(global_batch) / 256.0;
  if (optimizer == "adam") return 1e-3;
  if (optimizer == "lars")
    throw std::invalid_argument(
        "--optimizer lars needs --lr (its rate depends on --lars-eta and the schedule; "
        "docs/training.md has a recipe)");
  throw std::invalid_argument("unknown optimizer '" + optimizer + "' (expected sgd, lars or adam)");
}

double default_warmup_epochs(int epochs) { return std::min(5.0, 0.1 * epochs); }

std::string default_run_directory(const std::string& model, std::time_t now) {
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  return "run-" + model + "-" + stamp;
}

int decode_threads(int requested, bool gpu, int affinity_cpus, int online_cpus, int node_local_ranks) {
  if (requested > 0) return requested;
  if (!gpu) return 2;
  int share = std::max(affinity_cpus, 1);
  // Bound by the launcher (mpirun --bind-to, srun --cpu-bind): the affinity is the rank's share already.
  if (share >= online_cpus && node_local_ranks > 1) share /= node_local_ranks;
  return std::clamp(share - 1, 2, 32);
}

int decode_threads(int requested, bool gpu) {
  if (requested > 0 || !gpu) return decode_threads(requested, gpu, 1, 1, 1);
  cpu_set_t set;
  const int affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  const int online = static_cast<int>(std::max(sysconf(_SC_NPROCESSORS_ONLN), 1L));
  return decode_threads(requested, gpu, affinity, online, node_local_ranks());
}

}  // namespace fanstore::trainer
