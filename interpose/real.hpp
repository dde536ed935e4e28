// The next (real) definition of every interposed symbol, resolved once with dlsym(RTLD_NEXT), and the
// macros that declare the exported wrappers. The symbol list itself is data: interpose/symbols.txt.
#pragma once

#include <errno.h>

#include <fcntl.h>

#include <atomic>
#include <type_traits>

#include "decls.hpp"

namespace fanstore::interpose {

// One slot per line of symbols.txt (symbols.inc is generated from it by CMake).
enum class Sym : int {
#define FS_SYM(name) name,
#include "symbols.inc"
#undef FS_SYM
  kCount
};

extern std::atomic<void*> g_real[static_cast<int>(Sym::kCount)];
// What a slot holds once dlsym found no such symbol, so that it is not looked up on every call.
extern char g_missing_real;

// Slow path: dlsym(RTLD_NEXT, name) and publish the result. A symbol libc lacks is reported once, by
// name, on stderr; the wrapper then fails with ENOSYS instead of crashing.
void* ResolveReal(Sym s);

// The real function, or nullptr when no library after ours defines it.
template <class Fn>
inline Fn RealFn(Sym s) {
  void* p = g_real[static_cast<int>(s)].load(std::memory_order_acquire);
  if (__builtin_expect(p == nullptr, 0)) p = ResolveReal(s);
  if (__builtin_expect(p == &g_missing_real, 0)) return nullptr;
  return reinterpret_cast<Fn>(p);
}

// What a wrapper returns when the real symbol is missing: -1 / nullptr with errno = ENOSYS.
template <class R>
inline R MissingResult() {
  errno = ENOSYS;
  if constexpr (std::is_void_v<R>) {
    return;
  } else if constexpr (std::is_pointer_v<R>) {
    return nullptr;
  } else {
    return static_cast<R>(-1);
  }
}

template <class Fn, class... A>
inline auto CallReal(Sym s, A... a) {
  Fn f = RealFn<Fn>(s);
  using R = decltype(f(a...));
  if (__builtin_expect(f == nullptr, 0)) return MissingResult<R>();
  return f(a...);
}

}  // namespace fanstore::interpose

// Calls the real libc `name` with the given arguments (ENOSYS if libc has no such symbol).
#define FS_REAL(name, ...) \
  ::fanstore::interpose::CallReal<decltype(&::name)>(::fanstore::interpose::Sym::name __VA_OPT__(, ) __VA_ARGS__)

// Declares the exported wrapper for `name`. Every wrapper is `noexcept`: an exception that escaped into
// C code would terminate the host program, so the bodies catch everything at the boundary.
#define FS_WRAPPER(ret, name, params) extern "C" __attribute__((visibility("default"))) ret name params noexcept
