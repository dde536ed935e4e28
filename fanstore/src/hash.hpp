// XXH3-64 with a run-time CPU dispatch (AVX-512, AVX2, else libxxhash's baseline): the same values as XXH3_64bits
// everywhere, 3x faster with AVX2 on the verify-every-read paths. Our own dispatch (hash.cpp) rather than
// libxxhash's, whose _dispatch entry points exist only in some builds of libxxhash.so: the interposer links
// libxxhash statically and hidden (interpose/CMakeLists.txt).
#pragma once

#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace fanstore {

uint64_t Xxh3(const void* p, size_t n);
void Xxh3Update(XXH3_state_t* st, const void* p, size_t n);

}  // namespace fanstore
