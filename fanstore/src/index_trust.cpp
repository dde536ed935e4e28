// Trust tokens for the index (see index_trust.hpp).
#include "index_trust.hpp"

#include <cinttypes>
#include <cstdio>

namespace fanstore::index_trust {

namespace {
uint64_t Ns(const struct timespec& t) {
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}
}  // namespace

std::string Make(const struct stat& st, uint64_t body_xxh3) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "fst2:%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":%016" PRIx64,
                static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                Ns(st.st_mtim), Ns(st.st_ctim), body_xxh3);
  return buf;
}

bool Matches(const std::string& token, const struct stat& st, uint64_t body_xxh3) {
  return !token.empty() && token == Make(st, body_xxh3);
}

}  // namespace fanstore::index_trust
