// A stand-in for libfanstore-trainer-cuda.so of another ABI version (tests/trainer/cuda_module_test.sh):
// the trainer must refuse it by its version, before looking up anything else.
#include "cuda/module_abi.h"

extern "C" __attribute__((visibility("default"))) uint32_t fanstore_trainer_cuda_abi_version(void) {
  return FANSTORE_TRAINER_CUDA_ABI_VERSION + 1000;
}
