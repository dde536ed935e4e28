// Metrics JSON-lines file and the terminal progress line.
#include "metrics_log.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace fanstore::trainer {

MetricsLog::MetricsLog(const std::string& path, bool append) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file_) throw std::runtime_error(path + ": cannot open the metrics file (" + std::strerror(errno) + ")");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const std::string& json_object) {
  if (!file_) return;
  std::fputs(json_object.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

ProgressLine::ProgressLine(bool wanted) : enabled_(wanted && ::isatty(STDERR_FILENO) != 0) {}

void ProgressLine::update(const std::string& text) {
  if (!enabled_) return;
  std::fprintf(stderr, "\r%-100s", text.c_str());
  std::fflush(stderr);
  dirty_ = true;
}

void ProgressLine::finish() {
  if (!enabled_ || !dirty_) return;
  std::fputc('\n', stderr);
  dirty_ = false;
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  return buf;
}

}  // namespace fanstore::trainer
