// Helpers shared by the benchmark drivers: a monotonic clock, file lists, whole-file reads with plain POSIX calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fanstore::bench {

// Seconds on CLOCK_MONOTONIC (steady across threads, unaffected by NTP steps).
double NowSeconds();

// Reads `list_file` (one relative path per line, blank lines ignored) and prefixes each with `root` + "/".
// The list lives outside the mount on purpose: building it must not itself go through the file system under test.
// Returns false (with `error` set) when the list cannot be read or is empty.
bool ReadFileList(const std::string& list_file, const std::string& root, std::vector<std::string>& out,
                  std::string& error);

// open + read until EOF + close, the way Python's f.read() does it (the EOF read is part of the cost).
// Returns the bytes read, or -1 with errno set.
int64_t ReadWholeFile(const std::string& path, std::vector<char>& buffer);

// Splits [0, n) into `parts` contiguous ranges; returns the [begin, end) of range `i`.
std::pair<size_t, size_t> SliceRange(size_t n, size_t parts, size_t i);

}  // namespace fanstore::bench
