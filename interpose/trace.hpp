// Stderr output of the interposer: single-write lines (no stdio, no allocation) and the FANSTORE_LOG=debug trace.
#pragma once

#include <string_view>

namespace fanstore::interpose {

// Writes the pieces followed by '\n' with one write(2) on fd 2 (truncated at 1 KiB).
void WriteLineV(std::initializer_list<std::string_view> parts);
template <class... A>
void WriteLine(A... parts) {
  WriteLineV({std::string_view(parts)...});
}

// FANSTORE_LOG=debug: "fanstore: <call> <path> = <result> (errno <n>)" for every call served from the image.
void TraceCall(const char* call, const char* path, long result, int err);
void TraceFd(const char* call, int fd, long result, int err);

}  // namespace fanstore::interpose
