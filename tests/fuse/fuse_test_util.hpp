// Helpers for the FUSE tests: a generated source tree, packing, running `fanstore` and waiting for mounts.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fanstore::fusetest {

// Path of the `fanstore` CLI under test (set at build time).
const char* CliPath();

// A fresh directory under $TMPDIR (or /tmp); removed (after unmounting anything below it) by RemoveTree.
std::string MakeTempDir(const char* tag);
void RemoveTree(const std::string& dir);

void WriteFile(const std::string& path, const std::string& bytes);
std::string ReadWholeFile(const std::string& path);  // throws std::runtime_error on failure
// Deterministic bytes that zstd cannot shrink (so they are stored raw and a flipped byte is a checksum error).
std::string RandomBytes(size_t n, uint32_t seed);

// Writes the test tree: files of several sizes, nested and empty directories, a zero-byte file,
// a compressible file and `bad.bin` (which the tests corrupt after packing).
void MakeSourceTree(const std::string& root);

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string output;  // stdout + stderr
};
// Runs argv (argv[0] is a path) to completion and captures its output.
RunResult RunCommand(const std::vector<std::string>& argv);
// Starts argv in the background with its output appended to `log_path`; returns the pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path);

bool IsMounted(const std::string& path);  // per /proc/self/mountinfo
// Polls until `path` is (want=true) or is not (want=false) a mount point; false after `seconds`.
// When `pid` > 0 and that process exits first, returns false at once.
// Hang detection, not a speed check: the waits below return as soon as the condition holds, so the bound only
// has to be long enough that a loaded 2-core CI machine never reaches it.
inline constexpr double kHangSeconds = 120;
bool WaitMounted(const std::string& path, bool want, double seconds, pid_t pid = -1);

// Flips one byte of `rel` inside the packed image at `image` (found through the index).
void CorruptStoredFile(const std::string& image, const std::string& rel);

}  // namespace fanstore::fusetest
