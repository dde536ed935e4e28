#define FS_ISA avx512
#include "hash_x86.inc"
