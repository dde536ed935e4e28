// Shared CLI helpers (see cli_util.hpp).
#include "cli_util.hpp"

#include <unistd.h>

#include <cstdio>

namespace fanstore::cli {

int Fail(const std::string& cmd, const std::string& message) {
  std::fprintf(stderr, "fanstore %s: %s\n", cmd.c_str(), message.c_str());
  return 1;
}

int Fail(const std::string& cmd, const Status& s) { return Fail(cmd, s.ToString()); }

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

bool StderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

}  // namespace fanstore::cli
