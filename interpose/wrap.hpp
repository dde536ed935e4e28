// Helpers shared by the wrap_*.cpp files: the exception boundary and the common shapes of path calls.
#pragma once

#include <errno.h>

#include <new>
#include <utility>

#include "real.hpp"
#include "resolve.hpp"
#include "state.hpp"
#include "trace.hpp"

namespace fanstore::interpose {

// Runs `f` (the "ours" branch of a wrapper) with the reentrancy guard set, so Client's own libc calls
// pass straight through, and turns any exception into `on_error` with errno ENOMEM: nothing may
// unwind into C callers.
template <class F, class R>
inline R Serve(F&& f, R on_error) noexcept {
  ReentrancyGuard guard;
  try {
    return std::forward<F>(f)();
  } catch (...) {
    errno = ENOMEM;
    return on_error;
  }
}

// Classify with the exception boundary; an allocation failure is reported as kFail/ENOMEM.
inline Resolved SafeClassify(int dirfd, const char* path, bool follow_last = true) noexcept {
  ReentrancyGuard guard;
  try {
    return Classify(dirfd, path, follow_last);
  } catch (...) {
    Resolved r;
    r.kind = Resolved::kFail;
    r.err = ENOMEM;
    return r;
  }
}

// AT_EMPTY_PATH with an empty or NULL path names the dirfd itself (Linux 6.11+ accepts NULL there):
// true when that is the case, with `*ours`/`*id` saying whether the target is one of our entries.
// The wrapper then answers from the image or hands the call to libc unchanged; no path is dereferenced.
inline bool SafeEmptyPath(int dirfd, const char* path, int flags, bool* ours, uint32_t* id) noexcept {
  // libc declares these paths __nonnull, which lets GCC drop a NULL test after inlining even with
  // -fno-delete-null-pointer-checks: hide the pointer's provenance from the optimiser.
  asm("" : "+r"(path));
  if (!(flags & AT_EMPTY_PATH) || (path != nullptr && path[0] != '\0')) return false;
  ReentrancyGuard guard;
  try {
    return EmptyPathTarget(dirfd, path, flags, ours, id);
  } catch (...) {
    *ours = false;
    return true;
  }
}

// Ends an "ours" call: leaves errno = err on failure, the caller's errno on success, and traces it.
inline long Finish(const char* call, const char* path, long result, int err, int saved_errno) {
  TraceCall(call, path, result, err);
  errno = result < 0 ? err : saved_errno;
  return result;
}

// A call that may only read: looks up (dirfd, path) and runs `on_entry(id)` -> 0 or errno.
// Shared by stat/access/xattr-style calls.
template <class F>
inline int ServePath(const char* call, const Resolved& classified, const char* path, F&& on_entry) noexcept {
  int saved = errno;
  int err = Serve(
      [&]() -> int {
        Resolved r = classified;
        LookUp(&r);
        if (r.kind == Resolved::kFail) return r.err;
        return on_entry(r.id);
      },
      ENOMEM);
  return static_cast<int>(Finish(call, path, err ? -1 : 0, err, saved));
}

}  // namespace fanstore::interpose
