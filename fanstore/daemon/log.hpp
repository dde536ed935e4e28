// Rank-prefixed one-line messages of the daemon: "fanstore serve[rank 2]: ...".
#pragma once

namespace fanstore::daemon {

void SetLogRank(int rank);
// One line on stdout (progress, ready, exit summary), flushed so launch scripts see it at once.
void Info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// One line on stderr (errors). Preserves errno.
void Error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace fanstore::daemon
