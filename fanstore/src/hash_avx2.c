#define FS_ISA avx2
#include "hash_x86.inc"
