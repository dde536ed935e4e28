// Rank-prefixed logging for the daemon; each message is written with one call so lines never interleave.
#include "log.hpp"

#include <cerrno>
#include <cstdarg>
#include <cstdio>

namespace fanstore::daemon {
namespace {

int g_rank = -1;

void Emit(FILE* f, const char* fmt, va_list ap) {
  int saved = errno;
  char body[1024];
  std::vsnprintf(body, sizeof body, fmt, ap);
  char line[1100];
  if (g_rank >= 0) std::snprintf(line, sizeof line, "fanstore serve[rank %d]: %s\n", g_rank, body);
  else std::snprintf(line, sizeof line, "fanstore serve: %s\n", body);
  std::fputs(line, f);
  std::fflush(f);
  errno = saved;
}

}  // namespace

void SetLogRank(int rank) { g_rank = rank; }

void Info(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Emit(stdout, fmt, ap);
  va_end(ap);
}

void Error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Emit(stderr, fmt, ap);
  va_end(ap);
}

}  // namespace fanstore::daemon
