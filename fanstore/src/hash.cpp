#include "hash.hpp"

extern "C" {
// hash_x86.inc compiled for one instruction set each (hash_avx2.c, hash_avx512.c).
uint64_t fanstore_xxh3_avx2(const void* p, size_t n);
void fanstore_xxh3_update_avx2(void* st, const void* p, size_t n);
uint64_t fanstore_xxh3_avx512(const void* p, size_t n);
void fanstore_xxh3_update_avx512(void* st, const void* p, size_t n);
}

namespace fanstore {
namespace {

struct Impl {
  uint64_t (*hash)(const void*, size_t);
  void (*update)(void*, const void*, size_t);
};

uint64_t Plain(const void* p, size_t n) { return XXH3_64bits(p, n); }
void PlainUpdate(void* st, const void* p, size_t n) { XXH3_64bits_update(static_cast<XXH3_state_t*>(st), p, n); }

Impl Choose() {
#ifdef FANSTORE_XXH3_X86  // (fanstore/CMakeLists.txt builds hash_avx2.c and hash_avx512.c)
  __builtin_cpu_init();   // (may run before libgcc's constructor: the interposer's, the loader's audit module)
  if (__builtin_cpu_supports("avx512f")) return {fanstore_xxh3_avx512, fanstore_xxh3_update_avx512};
  if (__builtin_cpu_supports("avx2")) return {fanstore_xxh3_avx2, fanstore_xxh3_update_avx2};
#endif
  return {Plain, PlainUpdate};
}

const Impl& Chosen() {
  static const Impl impl = Choose();
  return impl;
}

}  // namespace

uint64_t Xxh3(const void* p, size_t n) { return Chosen().hash(p, n); }
void Xxh3Update(XXH3_state_t* st, const void* p, size_t n) { Chosen().update(st, p, n); }

}  // namespace fanstore
