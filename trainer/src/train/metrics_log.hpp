// Training output: JSON lines for machines (metrics file) and a progress line for people (a terminal).
#pragma once

#include <cstdio>
#include <string>

namespace fanstore::trainer {

class MetricsLog {
 public:
  // Opens `path` for this run alone (one that another run writes is an error: an flock held while this lives),
  // appending when `append`, else emptying it; with `keep_records` a file that holds records is an error instead
  // (an explicit --metrics: maybe another run's results). An empty path logs nothing.
  MetricsLog(const std::string& path, bool append, bool keep_records = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  // One JSON object per line, flushed so a crashed run still leaves its metrics.
  void write(const std::string& json_object);

 private:
  std::FILE* file_ = nullptr;
};

// Rewrites one status line on stderr ("\r...") when stderr is a terminal; silent otherwise.
class ProgressLine {
 public:
  // `wanted` false (ranks other than 0) keeps it silent even on a terminal.
  explicit ProgressLine(bool wanted);
  void update(const std::string& text);
  void finish();

 private:
  bool enabled_ = false;
  bool dirty_ = false;
};

// Formats a double for JSON (NaN/Inf become null, which JSON has no numbers for).
std::string json_number(double value);

}  // namespace fanstore::trainer
