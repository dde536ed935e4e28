// exec and spawn by a name the kernel cannot resolve: glibc's execv/execvp/posix_spawn[p] call an internal
// execve no wrapper sees, so a program stored in the image (or found through a PATH entry under the mount)
// was ENOENT. These run the same searches on our execve, and spawn programs of the image from a copy or a memfd.
#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace fanstore::interpose::exec_path {

// A "#!" line as the kernel's binfmt_script reads it: the interpreter and its one optional argument (the
// rest of the line, blanks trimmed), from the first 256 bytes.
struct Shebang {
  static constexpr int kLine = 256;
  char interp[kLine];
  char arg[kLine];
  bool has_arg;
};
// 1: the file behind fd starts with a "#!" line the kernel accepts (*out filled); 0: it does not start with
// "#!"; -1: a "#!" line the kernel refuses (no interpreter, or no line end within 256 bytes): ENOEXEC.
int ReadShebang(int fd, Shebang* out);

// Runs a "#!" script as the kernel does -- its interpreter, with argv [interp, arg?, `path` as given, argv[1..]]
// -- through our execve, so the script keeps its own path ($0, __file__ next to its neighbours, not /dev/fd/N)
// and an interpreter stored in the image runs too. ELOOP past the kernel's 4 levels. -1 + errno.
int ExecScript(const Shebang& sb, const char* path, char* const argv[], char* const envp[]);
// For execve of a real file: true (and *sb) when it is a "#!" script whose interpreter is under the mount,
// which the kernel could not find. No allocation.
bool RealScriptWithImageInterpreter(const char* path, Shebang* sb);

// A kernel-visible copy of image program `id` (its kernel fd `fd`), made once per node (mirror.hpp), to exec by
// its path: the loader then finds libraries through $ORIGIN, as from the source tree. False when no copy can be
// had; the caller runs the memfd instead.
bool ExecCopy(uint32_t id, int fd, std::string* path);

// glibc's execvpe on our execve wrapper: a name with '/' is exec'd as is; otherwise each PATH entry (the
// caller's PATH, "/bin:/usr/bin" when unset) is tried in order, EACCES remembered, ENOENT-like errors
// skipped; a candidate that is not an executable format (ENOEXEC) is run by /bin/sh. Returns -1 + errno.
int Execvpe(const char* file, char* const argv[], char* const envp[]);

// posix_spawn (`search`: posix_spawnp) when the program is ours: a path under the mount, or a PATH search
// that meets an entry under the mount first. The program runs from its copy (ExecCopy) or a memfd (scripts
// through /dev/fd/N, as fexecve does); a static one is handed to `fanstore run`. False (nothing done) when
// libc should spawn it as usual; true with *rc = posix_spawn's result otherwise.
bool Spawn(pid_t* pid, const char* file, bool search, const posix_spawn_file_actions_t* fa,
           const posix_spawnattr_t* attr, char* const argv[], char* const envp[], int* rc);

}  // namespace fanstore::interpose::exec_path
