// Metrics JSON-lines file and the terminal progress line.
#include "metrics_log.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace fanstore::trainer {

MetricsLog::MetricsLog(const std::string& path, bool append, bool keep_records) {
  if (path.empty()) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path + ": cannot open the metrics file (" + std::strerror(errno) + ")");
  struct stat st {};
  std::string error;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0)
    error = errno == EWOULDBLOCK ? "--metrics " + path +
                                       ": another fanstore-train run writes this file; wait for it to end, or "
                                       "choose another --metrics"
                                 : path + ": cannot lock the metrics file (" + std::strerror(errno) + ")";
  else if (!append && keep_records && ::fstat(fd, &st) == 0 && st.st_size > 0)
    error = "--metrics " + path +
            " holds another run's records: pass --resume to append to them, or choose another --metrics";
  else if (!append && ::ftruncate(fd, 0) != 0)
    error = path + ": cannot empty the metrics file (" + std::strerror(errno) + ")";
  else if (!(file_ = ::fdopen(fd, "a"))) error = path + ": cannot open the metrics file (" + std::strerror(errno) + ")";
  if (!error.empty()) {
    ::close(fd);
    throw std::runtime_error(error);
  }
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
