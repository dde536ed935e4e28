// Exec of a program the preload cannot reach (static, set-ID, 32-bit: `busybox` run by a shell): it is handed
// to `fanstore run --fuse always`, which runs it with the image FUSE-mounted at the prefix. Never a silent miss.
#pragma once

#include <spawn.h>

#include <string>

namespace fanstore::interpose::handover {

// What the exec wrappers ask before they exec `path` (as the kernel will resolve it: an absolute path, or
// relative to the real cwd; `search_path`: resolve it through PATH as execvp does). True when the program
// cannot see the image through us and no FUSE mount serves the prefix in this mount namespace; *why then
// says so ("/bin/busybox is statically linked"). Cheap for the usual dynamic program: one open, two preads.
bool Needed(const char* path, bool search_path, std::string* why);
// The same for a program stored in the image, given its open fd.
bool NeededForFd(int fd, const char* shown_as, std::string* why);

// Replaces the process with `fanstore run --fuse always ... -- path argv[1..]` (argv[0] kept), with envp.
// Returns -1 with errno only when that is impossible (no fanstore binary known: the preload was set up by
// hand), after one line on stderr that names `fanstore run` and `fanstore mount`.
int Exec(const char* path, char* const argv[], char* const envp[], const std::string& why);
// posix_spawn of the same command line (pid, file actions and attributes as given). An errno value, as
// posix_spawn returns.
int Spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* attr,
          char* const argv[], char* const envp[], const std::string& why);

}  // namespace fanstore::interpose::handover
