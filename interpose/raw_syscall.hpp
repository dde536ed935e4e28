// A system call made with the `syscall` instruction itself (x86-64): what glibc's syscall(2) does, without
// going through our syscall() wrapper or dlsym, so it is safe inside allocators and before start-up.
#pragma once

#include <errno.h>

namespace fanstore::interpose {

// The kernel's result: >= 0, or -errno (errno is not touched).
inline long RawSyscall(long n, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0, long a6 = 0) {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
#else
#error "raw_syscall.hpp: only x86-64 is supported"
#endif
}

// glibc's convention: -1 with errno for results in [-4095, -1].
inline long RawSyscallErrno(long n, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0, long a6 = 0) {
  long r = RawSyscall(n, a1, a2, a3, a4, a5, a6);
  if (r < 0 && r >= -4095) {
    errno = static_cast<int>(-r);
    return -1;
  }
  return r;
}

}  // namespace fanstore::interpose
