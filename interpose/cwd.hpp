// The virtual working directory (a directory inside the mount) and a cached copy of the real one.
#pragma once

#include <string>

namespace fanstore::interpose {

// chdir into the mount sets a virtual cwd and leaves the kernel's cwd alone; relative paths then
// resolve against it. The real cwd is cached so relative paths can be classified without a syscall.
namespace cwd {

// Reads the kernel cwd and FANSTORE_CWD (set by a parent that exec'd us from inside the mount).
void Init();
// The environment block the process started with (the preload's constructor gets it): the loader's audit module
// reads FANSTORE_CWD there, and a change of the virtual cwd is written there too.
void SetStartEnvironment(char** envp);
bool HasVirtual();
// True when the real cwd is an ancestor of the mount or inside it, i.e. a relative path without
// '..' could still reach the mount. False lets relative paths skip classification entirely.
bool RealCwdNearMount();
// The absolute directory relative paths resolve against: the virtual cwd, or the cached real one.
std::string Base();
// Enters a directory inside the mount (absolute, normalised). Also exports FANSTORE_CWD for exec'd children.
void SetVirtual(const std::string& abs);
// Leaves the mount after a successful real chdir/fchdir: re-reads the kernel cwd.
void LeftMount();
// Copies the virtual cwd into buf (getcwd semantics). Returns false when there is none.
bool Virtual(std::string* out);

// pthread_atfork: the cwd lock must not be held across fork.
void LockForFork();
void UnlockForFork();

}  // namespace cwd
}  // namespace fanstore::interpose
