// The environment a child of an interposed process gets. docs/interpose.md promises that every dynamic process of
// the tree sees the image, but an explicit environment (`env -i`, Python's subprocess with env=..., posix_spawn's
// envp) may lack what the interposer needs there; this puts it back, without allocating (an exec from a forked
// child must not), unless `envp` sets an LD_PRELOAD of its own without the preload library.
#pragma once

#include <stddef.h>

#include <string>

namespace fanstore::interpose {

// Entries ChildEnv may fill for `envp` (its own, ours, the terminating null): for an alloca'd array.
size_t ChildEnvSlots(char* const envp[]);

// `envp` with, where it lacks them: the FANSTORE_* variables and LD_AUDIT this process started with (an `env -i`
// cleared its environ since), the preload library in front of its LD_PRELOAD (built in *merged), and FANSTORE_CWD:
// `cwd_kv` ("FANSTORE_CWD=...") when not null, replacing envp's, else this process's own. `envp` itself when it
// lacks nothing; else `slots` (ChildEnvSlots entries), filled.
char* const* ChildEnv(char* const envp[], const char* cwd_kv, char** slots, std::string* merged);

// Changes the value this process started with of a kept variable (one it has), for the children of an `env -i`.
void SetStartedVariable(const char* name, const char* value);

}  // namespace fanstore::interpose
