// `fanstore run` for programs LD_PRELOAD cannot reach (static, set-ID, 32-bit): the image is FUSE-mounted at
// the mount prefix in a private mount namespace that only the program and its children see.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fanstore::cli {

struct FuseRun {
  std::string image;   // absolute image directory (empty with daemon)
  std::string daemon;  // absolute socket of this node's `fanstore serve` (multi-node)
  std::string mount;   // normalised absolute prefix
  std::vector<std::string> command;
  std::optional<std::string> argv0;  // argv[0] for the program when it differs from command[0] (may be empty)
  std::string why;                   // "/bin/busybox is statically linked": the first half of every error line
};

// Creates the namespace (as root: a new mount namespace; otherwise a user namespace that maps only the
// caller's uid and gid), mounts the image read-only at `mount` with tools/mount's server (creating the
// directory if it is missing; mounting over a non-empty one, which stays visible outside), runs the
// command in it (in $FANSTORE_CWD when set, or its cwd entered again through the mount when that is below
// the prefix), forwards the signals sent to us (SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM;
// not those the terminal sent the whole process group), unmounts, and returns the exit status to use (a
// program killed by a signal makes this process die of the same signal, without a core file). The program
// and the server die with this process; the server never unmounts while the program runs.
// Anything that stops the mount is one line on stderr naming `fanstore mount`, and the program never runs.
// The caller has set LD_PRELOAD and the FANSTORE_* variables: dynamic children still use the preload.
int RunUnderFuse(const FuseRun& r);

}  // namespace fanstore::cli
