// fanstore-microbench's benchmarks: the core's lookup/decode/checksum paths in process, and POSIX stat/open/read on a
// tree (tmpfs without the preload: the baseline; the image's mount under `fanstore run`: the interposer's hot paths).
#pragma once

#include <string>

#include "fixture.hpp"

namespace fanstore::microbench {

// Registers "core/..." benchmarks over the public Image/Client API. False (with `error`) when the image does not open.
bool RegisterCoreBenchmarks(const Fixture& f, std::string* error);

// Registers "<group>/stat", "<group>/open+close", "<group>/read 4KiB", "<group>/read 128KiB", "<group>/read 4MiB"
// over the fixture's files under `root` (the source tree, or the mount prefix the image is served at).
void RegisterPosixBenchmarks(const Fixture& f, const std::string& group, const std::string& root);

}  // namespace fanstore::microbench
