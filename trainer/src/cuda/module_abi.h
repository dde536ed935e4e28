/* The C ABI between the trainer (src/cuda_loader.cpp) and the CUDA backend module
 * libfanstore-trainer-cuda.so (src/cuda/module_entry.cpp), which the trainer dlopen()s only when a
 * CUDA device is asked for or plausibly present, so CPU runs never load cudart, cuDNN, cuBLAS(Lt) or
 * NCCL. Four extern "C" functions, found with dlsym by the names below:
 *
 *   fanstore_trainer_cuda_abi_version()  checked first; the others are only looked up when it matches
 *   fanstore_trainer_cuda_device_count   cuda::device_count
 *   fanstore_trainer_cuda_make_backend   cuda::make_cuda_backend
 *   fanstore_trainer_cuda_make_nccl_communicator  cuda::make_nccl_communicator
 *
 * No exception crosses these functions: each returns 0 on success and, on failure, a non-zero value
 * with the exception's what() in `error` (always NUL-terminated, cut to error_size); the trainer
 * throws std::runtime_error with that text. The C++ objects they hand over (std::shared_ptr<Backend>,
 * std::unique_ptr<Communicator>) are passed as pointers to objects of the caller: the module is built
 * from the same tree by the same compiler and installed next to the program, and the version below
 * says whether it is such a module. Bump it whenever these signatures or the classes crossing them
 * (Backend, Communicator, Tensor and what they hold) change in a way an older module would misread.
 */
#ifndef FANSTORE_TRAINER_CUDA_MODULE_ABI_H
#define FANSTORE_TRAINER_CUDA_MODULE_ABI_H

#include <stddef.h>
#include <stdint.h>

#define FANSTORE_TRAINER_CUDA_ABI_VERSION 1u
#define FANSTORE_TRAINER_CUDA_MODULE_FILE "libfanstore-trainer-cuda.so"

#ifdef __cplusplus
extern "C" {
#endif

/* cuda::CudaBackendOptions as plain ints. */
typedef struct fanstore_trainer_cuda_options {
  int device;        /* CUDA device ordinal */
  int precision;     /* fanstore::trainer::Precision as an int */
  int channels_last; /* -1 default, 0 off, 1 on */
  int deterministic; /* 0 or 1 */
} fanstore_trainer_cuda_options;

typedef uint32_t (*fanstore_trainer_cuda_abi_version_fn)(void);
/* Devices the CUDA runtime sees; 0 with `reason` set when none (cudaGetDeviceCount's error). Never fails. */
typedef int (*fanstore_trainer_cuda_device_count_fn)(char* reason, size_t reason_size);
/* backend_out: a std::shared_ptr<fanstore::trainer::Backend>* that receives the backend. */
typedef int (*fanstore_trainer_cuda_make_backend_fn)(const fanstore_trainer_cuda_options* options, void* backend_out,
                                                     char* error, size_t error_size);
/* host: Communicator*, backend: Backend* (a CUDA backend), communicator_out: std::unique_ptr<Communicator>*. */
typedef int (*fanstore_trainer_cuda_make_nccl_communicator_fn)(void* host, void* backend, void* communicator_out,
                                                               char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
