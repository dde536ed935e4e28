// XXH3-64 through libxxhash's run-time CPU dispatch (AVX2/AVX-512 where present): the same values as
// XXH3_64bits everywhere, 2-4x faster on the verify-every-read paths.
#pragma once

#include <xxhash.h>

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#define XXH_DISPATCH_DISABLE_REPLACE  // call the _dispatch names explicitly below
#include <xxh_x86dispatch.h>
#define FANSTORE_XXH3_DISPATCH 1
#endif

namespace fanstore {

inline uint64_t Xxh3(const void* p, size_t n) {
#ifdef FANSTORE_XXH3_DISPATCH
  return XXH3_64bits_dispatch(p, n);
#else
  return XXH3_64bits(p, n);
#endif
}

inline void Xxh3Update(XXH3_state_t* st, const void* p, size_t n) {
#ifdef FANSTORE_XXH3_DISPATCH
  XXH3_64bits_update_dispatch(st, p, n);
#else
  XXH3_64bits_update(st, p, n);
#endif
}

}  // namespace fanstore
