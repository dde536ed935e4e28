// Virtual cwd state: one mutex-protected pair of strings, and an atomic flag for the fast "no virtual cwd" check.
#include "cwd.hpp"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>

#include "fanstore/env.hpp"
#include "fanstore/path.hpp"
#include "real.hpp"
#include "state.hpp"

namespace fanstore::interpose::cwd {
namespace {

// Constructed on first use (not at load time), and deliberately leaked: exit-time calls may still need it.
struct CwdState {
  std::mutex mu;
  std::string virt;  // "" = none
  std::string real;
};
CwdState& S() {
  static CwdState* s = new CwdState;
  return *s;
}
std::atomic<bool> g_has_virtual{false};
std::atomic<bool> g_real_near_mount{true};  // conservative until Init
char** g_start_env = nullptr;               // the environment block the process started with (SetStartEnvironment)

// The loader's audit module (audit.cpp) resolves relative library paths against FANSTORE_CWD, read in a namespace of
// its own whose environment stays the block the process started with; ours moves to a new block at the first new
// variable. So the virtual cwd goes into that block's FANSTORE_CWD entry too, when it has one (a process started
// from a directory of the image); "" when there is none. Under s.mu. The strings are kept for good.
void ShowToLoader(const std::string& value) {
  if (g_start_env == nullptr) return;
  const size_t n = strlen(env::kCwd);
  for (char** e = g_start_env; *e != nullptr; ++e)
    if (strncmp(*e, env::kCwd, n) == 0 && (*e)[n] == '=') {
      static std::set<std::string>* kept = new std::set<std::string>;
      *e = const_cast<char*>(kept->insert(std::string(env::kCwd) + "=" + value).first->c_str());
      return;
    }
}

bool Near(const std::string& real) {
  std::string_view m(g_mount, g_mount_len), r(real);
  auto prefix_of = [](std::string_view a, std::string_view b) {  // a is b or an ancestor of b
    return b.size() >= a.size() && b.compare(0, a.size(), a) == 0 &&
           (b.size() == a.size() || a == "/" || b[a.size()] == '/');
  };
  return prefix_of(r, m) || prefix_of(m, r);
}

void RefreshRealLocked(CwdState& s) {
  char buf[PATH_MAX];
  // getcwd is interposed: call the real one (we are inside a guard anyway).
  if (FS_REAL(getcwd, buf, sizeof buf) != nullptr) {
    s.real = buf;
  } else {
    s.real = "/";  // unreachable cwd: keep classification conservative below
  }
  g_real_near_mount.store(Near(s.real), std::memory_order_release);
}

}  // namespace

void Init() {
  CwdState& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  RefreshRealLocked(s);
  const char* env = getenv(env::kCwd);
  if (env && *env == '/') {
    std::string n = NormalizeAbsolute(env);
    Classified c = ClassifyPath(n, std::string_view(g_mount, g_mount_len), "/");
    if (c.cls == PathClass::kOurs) {
      s.virt = n;
      g_has_virtual.store(true, std::memory_order_release);
    }
  }
}

void SetStartEnvironment(char** envp) {
  std::lock_guard<std::mutex> lock(S().mu);
  g_start_env = envp;
}

bool HasVirtual() { return g_has_virtual.load(std::memory_order_acquire); }
bool RealCwdNearMount() { return g_real_near_mount.load(std::memory_order_acquire); }

std::string Base() {
  CwdState& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.virt.empty() ? s.real : s.virt;
}

void SetVirtual(const std::string& abs) {
  CwdState& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.virt = abs;
    g_has_virtual.store(true, std::memory_order_release);
    ShowToLoader(abs);
  }
  // In the environment too, so every exec path (execv, execvp, posix_spawn: glibc-internal execve
  // calls we cannot see) hands the virtual cwd to the child. setenv leaks the old string, never frees it,
  // so concurrent getenv callers stay safe.
  setenv(env::kCwd, abs.c_str(), 1);
}

void LeftMount() {
  CwdState& s = S();
  bool had;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    had = !s.virt.empty();
    s.virt.clear();
    g_has_virtual.store(false, std::memory_order_release);
    RefreshRealLocked(s);
    if (had) ShowToLoader("");
  }
  if (had || getenv(env::kCwd)) unsetenv(env::kCwd);
}

bool Virtual(std::string* out) {
  if (!HasVirtual()) return false;
  CwdState& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.virt.empty()) return false;
  *out = s.virt;
  return true;
}

void LockForFork() { S().mu.lock(); }
void UnlockForFork() { S().mu.unlock(); }

}  // namespace fanstore::interpose::cwd
