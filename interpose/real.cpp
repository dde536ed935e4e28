// Resolution of the real libc symbols behind the wrappers (dlsym(RTLD_NEXT), once per symbol).
#include "real.hpp"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#include "state.hpp"
#include "trace.hpp"

namespace fanstore::interpose {

std::atomic<void*> g_real[static_cast<int>(Sym::kCount)];
char g_missing_real;

namespace {
const char* const kNames[] = {
#define FS_SYM(name) #name,
#include "symbols.inc"
#undef FS_SYM
};
}  // namespace

void* ResolveReal(Sym s) {
  std::atomic<void*>& slot = g_real[static_cast<int>(s)];
  void* p = slot.load(std::memory_order_acquire);
  if (p == &g_missing_real) return nullptr;
  if (p != nullptr) return p;
  // dlsym may allocate or take loader locks; it never calls the file functions we wrap on glibc 2.36,
  // and the reentrancy guard would send such a call straight to libc anyway. Two threads racing here
  // both get the same answer, so a plain store is enough.
  ReentrancyGuard guard;
  p = dlsym(RTLD_NEXT, kNames[static_cast<int>(s)]);
  if (p == nullptr) {
    WriteLine("fanstore: no library after libfanstore_preload.so defines ", kNames[static_cast<int>(s)],
              "; calls to it fail with ENOSYS");
    slot.store(&g_missing_real, std::memory_order_release);
    return nullptr;
  }
  slot.store(p, std::memory_order_release);
  return p;
}

}  // namespace fanstore::interpose
