// Process-wide interposer state: initialisation mode, the Client, the mount prefix, the reentrancy guard.
#pragma once

#include <errno.h>

#include <atomic>
#include <cstddef>

#include "fanstore/client.hpp"

namespace fanstore::interpose {

enum class Mode : int {
  kOff = 0,  // not initialised yet, or FANSTORE_IMAGE unset: every call goes to libc untouched
  kBroken,   // the image failed to open: paths under the mount fail with EIO, the rest pass through
  kReady,    // serving the image
};

// True while this thread runs interposer or Client code: calls it makes go straight to libc.
// initial-exec TLS: one %fs-relative load, no allocation on first use (safe inside dlsym and early start-up).
extern thread_local bool t_inside __attribute__((tls_model("initial-exec")));

struct ReentrancyGuard {
  bool prev;
  ReentrancyGuard() : prev(t_inside) { t_inside = true; }
  ~ReentrancyGuard() { t_inside = prev; }
  ReentrancyGuard(const ReentrancyGuard&) = delete;
  ReentrancyGuard& operator=(const ReentrancyGuard&) = delete;
};

// Restores errno on scope exit unless Fail() is called, so successful calls never clobber it.
class ErrnoKeeper {
 public:
  ErrnoKeeper() : saved_(errno) {}
  ~ErrnoKeeper() { errno = failed_ ? err_ : saved_; }
  // Records the error to leave in errno; returns -1 for `return keeper.Fail(ENOENT);`.
  int Fail(int err) {
    failed_ = true;
    err_ = err;
    return -1;
  }
  bool failed() const { return failed_; }
  ErrnoKeeper(const ErrnoKeeper&) = delete;
  ErrnoKeeper& operator=(const ErrnoKeeper&) = delete;

 private:
  int saved_;
  int err_ = 0;
  bool failed_ = false;
};

extern std::atomic<int> g_mode;
extern Client* g_client;  // set before g_mode becomes kReady, never freed (exit-time calls still use it)
extern bool g_has_links;  // the image holds symlinks: paths under the mount are resolved through them
extern char g_mount[];    // normalised mount prefix, e.g. "/fanstore"
extern size_t g_mount_len;
extern char g_mirror[];      // where this process's copies of the image's programs and libraries are (mirror::Where)
extern size_t g_mirror_len;  // 0: none
extern bool g_log_debug;     // FANSTORE_LOG=debug

inline Mode CurrentMode() { return static_cast<Mode>(g_mode.load(std::memory_order_acquire)); }
// Should this call be looked at at all? False before init, when disabled, and for our own nested calls.
inline bool Active() { return !t_inside && g_mode.load(std::memory_order_acquire) != static_cast<int>(Mode::kOff); }
inline bool Ready() { return CurrentMode() == Mode::kReady; }

// Runs once (constructor, or the first wrapper call that finds us uninitialised on the main thread).
void EnsureInit();
// FANSTORE_STATS=1: prints this process's summary line once (atexit, or _exit for forked workers).
void PrintStatsBeforeExit();

}  // namespace fanstore::interpose
