// Line-at-a-time stderr output: used at start-up, for missing symbols and for the debug trace.
#include "trace.hpp"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "state.hpp"

namespace fanstore::interpose {
namespace {

struct Line {
  char buf[1024];
  size_t n = 0;
  void Add(std::string_view s) {
    size_t k = s.size() < sizeof buf - 1 - n ? s.size() : sizeof buf - 1 - n;
    memcpy(buf + n, s.data(), k);
    n += k;
  }
  void AddLong(long v) {
    char t[32];
    int k = snprintf(t, sizeof t, "%ld", v);
    Add(std::string_view(t, static_cast<size_t>(k)));
  }
  void Flush() {
    buf[n++] = '\n';
    // One write so lines from concurrent threads and processes do not interleave.
    ssize_t w = write(2, buf, n);
    (void)w;
  }
};

}  // namespace

void WriteLineV(std::initializer_list<std::string_view> parts) {
  int saved = errno;
  Line l;
  for (auto p : parts) l.Add(p);
  l.Flush();
  errno = saved;
}

void TraceCall(const char* call, const char* path, long result, int err) {
  if (!g_log_debug) return;
  int saved = errno;
  Line l;
  l.Add("fanstore: ");
  l.Add(call);
  l.Add(" ");
  l.Add(path ? path : "(null)");
  l.Add(" = ");
  l.AddLong(result);
  l.Add(" (errno ");
  l.AddLong(result < 0 ? err : 0);
  l.Add(")");
  l.Flush();
  errno = saved;
}

void TraceFd(const char* call, int fd, long result, int err) {
  if (!g_log_debug) return;
  char t[24];
  snprintf(t, sizeof t, "fd %d", fd);
  TraceCall(call, t, result, err);
}

}  // namespace fanstore::interpose
