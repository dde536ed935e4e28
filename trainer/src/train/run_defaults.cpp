// Defaults of a training run: scaled learning rate, warm-up length, run directory name.
#include "trainer/run_defaults.hpp"

#include <algorithm>
#include <stdexcept>

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

}  // namespace fanstore::trainer
