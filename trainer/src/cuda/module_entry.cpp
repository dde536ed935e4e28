// The entry points of libfanstore-trainer-cuda.so (cuda/module_abi.h): the CUDA backend's three
// factories behind extern "C" functions that catch every exception and return its text instead.
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "cuda/cuda_backend.hpp"
#include "cuda/module_abi.h"

using namespace fanstore::trainer;

namespace {

void copy_text(const char* text, char* out, std::size_t size) {
  if (!out || size == 0) return;
  const std::size_t n = strnlen(text, size - 1);
  std::memcpy(out, text, n);
  out[n] = '\0';
}

// 0 when f() returns, 1 with the exception's text in `error` when it throws.
template <class F>
int guarded(char* error, std::size_t error_size, F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    copy_text(e.what(), error, error_size);
  } catch (...) {
    copy_text("unknown exception in the CUDA backend module", error, error_size);
  }
  return 1;
}

}  // namespace

#define FANSTORE_CUDA_MODULE_EXPORT extern "C" __attribute__((visibility("default")))

FANSTORE_CUDA_MODULE_EXPORT uint32_t fanstore_trainer_cuda_abi_version(void) {
  return FANSTORE_TRAINER_CUDA_ABI_VERSION;
}

FANSTORE_CUDA_MODULE_EXPORT int fanstore_trainer_cuda_device_count(char* reason, size_t reason_size) {
  int devices = 0;
  const int failed = guarded(reason, reason_size, [&] {
    std::string why;
    devices = cuda::device_count(&why);
    copy_text(why.c_str(), reason, reason_size);
  });
  return failed ? 0 : devices;
}

FANSTORE_CUDA_MODULE_EXPORT int fanstore_trainer_cuda_make_backend(const fanstore_trainer_cuda_options* options,
                                                                   void* backend_out, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    cuda::CudaBackendOptions o;
    o.device = options->device;
    o.precision = static_cast<Precision>(options->precision);
    o.channels_last = options->channels_last;
    o.deterministic = options->deterministic != 0;
    *static_cast<std::shared_ptr<Backend>*>(backend_out) = cuda::make_cuda_backend(o);
  });
}

FANSTORE_CUDA_MODULE_EXPORT int fanstore_trainer_cuda_make_nccl_communicator(void* host, void* backend,
                                                                             void* communicator_out, char* error,
                                                                             size_t error_size) {
  return guarded(error, error_size, [&] {
    *static_cast<std::unique_ptr<Communicator>*>(communicator_out) =
        cuda::make_nccl_communicator(*static_cast<Communicator*>(host), *static_cast<Backend*>(backend));
  });
}

// The module is handed to dlsym by these names: a mismatch between them and the typedefs of
// module_abi.h is a compile error here, not a crash at run time.
[[maybe_unused]] static const fanstore_trainer_cuda_abi_version_fn check_abi_version =
    &fanstore_trainer_cuda_abi_version;
[[maybe_unused]] static const fanstore_trainer_cuda_device_count_fn check_device_count =
    &fanstore_trainer_cuda_device_count;
[[maybe_unused]] static const fanstore_trainer_cuda_make_backend_fn check_make_backend =
    &fanstore_trainer_cuda_make_backend;
[[maybe_unused]] static const fanstore_trainer_cuda_make_nccl_communicator_fn check_make_nccl =
    &fanstore_trainer_cuda_make_nccl_communicator;
