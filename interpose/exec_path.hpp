// exec and spawn by a name the kernel cannot resolve: glibc's execv/execvp/posix_spawn[p] call an internal
// execve no wrapper sees, so a program stored in the image (or found through a PATH entry under the mount)
// was ENOENT. These run the same searches on our execve, and spawn programs of the image from a memfd.
#pragma once

#include <spawn.h>
#include <sys/types.h>

namespace fanstore::interpose::exec_path {

// glibc's execvpe on our execve wrapper: a name with '/' is exec'd as is; otherwise each PATH entry (the
// caller's PATH, "/bin:/usr/bin" when unset) is tried in order, EACCES remembered, ENOENT-like errors
// skipped; a candidate that is not an executable format (ENOEXEC) is run by /bin/sh. Returns -1 + errno.
int Execvpe(const char* file, char* const argv[], char* const envp[]);

// posix_spawn (`search`: posix_spawnp) when the program is ours: a path under the mount, or a PATH search
// that meets an entry under the mount first. The program runs from a memfd of the image's bytes (scripts
// through /dev/fd/N, as fexecve does); a static one is handed to `fanstore run`. False (nothing done) when
// libc should spawn it as usual; true with *rc = posix_spawn's result otherwise.
bool Spawn(pid_t* pid, const char* file, bool search, const posix_spawn_file_actions_t* fa,
           const posix_spawnattr_t* attr, char* const argv[], char* const envp[], int* rc);

}  // namespace fanstore::interpose::exec_path
